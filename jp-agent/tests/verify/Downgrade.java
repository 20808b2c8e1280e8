import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Opcodes;

/**
 * Copies class files as version 49 without stack map frames: the same code, checked by
 * the old inference verifier. Args: input root, output root, then class files relative
 * to the input root (none: every class under it).
 */
public class Downgrade {
    public static void main(String[] args) throws Exception {
        Path in = Paths.get(args[0]);
        Path out = Paths.get(args[1]);
        List<Path> files;
        if (args.length > 2) {
            files = Stream.of(args).skip(2).map(Paths::get).collect(Collectors.toList());
        } else {
            try (Stream<Path> s = Files.walk(in)) {
                files = s.filter(p -> p.toString().endsWith(".class")).map(in::relativize).collect(Collectors.toList());
            }
        }
        for (Path rel : files) {
            ClassReader cr = new ClassReader(Files.readAllBytes(in.resolve(rel)));
            ClassWriter cw = new ClassWriter(0);
            cr.accept(new ClassVisitor(Opcodes.ASM9, cw) {
                @Override
                public void visit(int version, int access, String name, String sig, String sup, String[] itf) {
                    super.visit(Opcodes.V1_5, access, name, sig, sup, itf);
                }
            }, ClassReader.SKIP_FRAMES);
            Path target = out.resolve(rel.toString());
            Files.createDirectories(target.getParent());
            Files.write(target, cw.toByteArray());
        }
    }
}
