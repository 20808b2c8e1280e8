import java.io.IOException;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.TokenFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.Tokenizer;
import org.apache.lucene.analysis.core.WhitespaceTokenizer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.StringField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.Term;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.store.Directory;

// Lucene indexing and searching a few documents. Our LowerFilter is called by
// Lucene's indexing chain: incrementToken() runs once per token plus once at the
// end of each analyzed field value (see real_programs.rs for the exact count).
public class LuceneDemo {
    static final String[] DOCS = {
        "The quick brown fox jumps over the lazy dog",
        "A lazy afternoon with a Quick nap",
        "Brown bread and brown butter",
        "Foxes are quick and clever animals",
        "Dogs and foxes are not friends",
    };

    static final class LowerFilter extends TokenFilter {
        private final CharTermAttribute term = addAttribute(CharTermAttribute.class);

        LowerFilter(TokenStream in) { super(in); }

        @Override
        public boolean incrementToken() throws IOException {
            if (!input.incrementToken()) return false;
            char[] b = term.buffer();
            for (int i = 0; i < term.length(); i++) b[i] = Character.toLowerCase(b[i]);
            return true;
        }
    }

    static final class DemoAnalyzer extends Analyzer {
        @Override
        protected TokenStreamComponents createComponents(String field) {
            Tokenizer t = new WhitespaceTokenizer();
            return new TokenStreamComponents(t, new LowerFilter(t));
        }
    }

    static Query both(String a, String b) {
        return new BooleanQuery.Builder()
            .add(new TermQuery(new Term("body", a)), BooleanClause.Occur.MUST)
            .add(new TermQuery(new Term("body", b)), BooleanClause.Occur.MUST)
            .build();
    }

    public static void main(String[] args) throws Exception {
        Directory dir = new ByteBuffersDirectory();
        IndexWriterConfig cfg = new IndexWriterConfig(new DemoAnalyzer());
        cfg.setUseCompoundFile(false);
        try (IndexWriter w = new IndexWriter(dir, cfg)) {
            for (int i = 0; i < DOCS.length; i++) {
                Document d = new Document();
                d.add(new StringField("id", "doc" + i, Field.Store.YES));
                d.add(new TextField("body", DOCS[i], Field.Store.YES));
                w.addDocument(d);
            }
        }
        try (DirectoryReader r = DirectoryReader.open(dir)) {
            IndexSearcher s = new IndexSearcher(r);
            Query[] qs = {
                new TermQuery(new Term("body", "quick")),
                new TermQuery(new Term("body", "brown")),
                both("lazy", "quick"),
                new TermQuery(new Term("body", "cat")),
            };
            for (Query q : qs) {
                TopDocs td = s.search(q, 10);
                StringBuilder sb = new StringBuilder(q.toString()).append(" ->");
                for (ScoreDoc sd : td.scoreDocs) sb.append(' ').append(s.doc(sd.doc).get("id"));
                System.out.println(sb);
            }
            System.out.println("docs=" + r.numDocs());
        }
    }
}
