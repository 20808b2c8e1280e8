import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Opcodes;

/**
 * Copies class files (args: out dir, then class files) as version 49 without stack map
 * frames: the same code, checked by the old inference verifier.
 */
public class Downgrade {
    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]);
        for (int i = 1; i < args.length; i++) {
            Path in = Paths.get(args[i]);
            ClassReader cr = new ClassReader(Files.readAllBytes(in));
            ClassWriter cw = new ClassWriter(0);
            cr.accept(new ClassVisitor(Opcodes.ASM9, cw) {
                @Override
                public void visit(int version, int access, String name, String sig, String sup, String[] itf) {
                    super.visit(Opcodes.V1_5, access, name, sig, sup, itf);
                }
            }, ClassReader.SKIP_FRAMES);
            Files.write(out.resolve(in.getFileName()), cw.toByteArray());
        }
    }
}
