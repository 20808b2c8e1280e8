import java.util.Set;
import java.util.TreeSet;
import javax.annotation.processing.AbstractProcessor;
import javax.annotation.processing.RoundEnvironment;
import javax.annotation.processing.SupportedAnnotationTypes;
import javax.lang.model.SourceVersion;
import javax.lang.model.element.Element;
import javax.lang.model.element.TypeElement;

// An annotation processor run by javac: application code inside the compiler.
// javac calls process() once per round: one round over the sources plus the final
// round, so exactly 2 calls when nothing is generated.
@SupportedAnnotationTypes("*")
public class JpProcessor extends AbstractProcessor {
    @Override
    public SourceVersion getSupportedSourceVersion() {
        return SourceVersion.latestSupported();
    }

    @Override
    public boolean process(Set<? extends TypeElement> annotations, RoundEnvironment env) {
        Set<String> names = new TreeSet<>();
        for (Element e : env.getRootElements()) names.add(e.getSimpleName().toString());
        System.out.println("round over=" + env.processingOver() + " roots=" + names);
        return false;
    }
}
