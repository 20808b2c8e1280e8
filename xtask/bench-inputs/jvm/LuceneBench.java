import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.StringField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.SerialMergeScheduler;
import org.apache.lucene.index.Term;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.store.ByteBuffersDirectory;

// bench jvm (lucene): index generated documents, then run term queries. `main` is the
// whole-run program; SteadyBench calls `work` in rounds.
public class LuceneBench {
    static final String[] WORDS = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
        "hotel", "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"};

    public static void main(String[] args) throws Exception {
        System.out.println("hits " + work());
    }

    static long work() throws Exception {
        ByteBuffersDirectory dir = new ByteBuffersDirectory();
        // Merges on the indexing thread, so that its CPU time is the whole round's work.
        IndexWriterConfig config = new IndexWriterConfig(new StandardAnalyzer());
        config.setMergeScheduler(new SerialMergeScheduler());
        try (IndexWriter w = new IndexWriter(dir, config)) {
            StringBuilder sb = new StringBuilder();
            for (int d = 0; d < 6000; d++) {
                sb.setLength(0);
                for (int i = 0; i < 40; i++) sb.append(WORDS[(d * 31 + i * i) % WORDS.length]).append(' ');
                Document doc = new Document();
                doc.add(new StringField("id", Integer.toString(d), Field.Store.YES));
                doc.add(new TextField("body", sb.toString(), Field.Store.NO));
                w.addDocument(doc);
            }
        }
        long hits = 0;
        try (DirectoryReader r = DirectoryReader.open(dir)) {
            IndexSearcher s = new IndexSearcher(r);
            for (int q = 0; q < 2000; q++) hits += s.count(new TermQuery(new Term("body", WORDS[q % WORDS.length])));
        }
        return hits;
    }
}
