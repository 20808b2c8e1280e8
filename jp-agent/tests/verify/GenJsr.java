import java.nio.file.Files;
import java.nio.file.Paths;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Label;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;

/**
 * Writes JsrFixture.class (version 49) into the directory given: subroutines (jsr/ret)
 * shared by a normal path and an exception handler, a subroutine called in a loop, and
 * one in a constructor. Expected output: 10, -1, 4, 8 (see rewrite_jsr.rs for the counts).
 */
public class GenJsr implements Opcodes {
    public static void main(String[] args) throws Exception {
        ClassWriter cw = new ClassWriter(0);
        cw.visit(V1_5, ACC_PUBLIC | ACC_SUPER, "JsrFixture", null, "java/lang/Object", null);
        cw.visitField(ACC_STATIC, "counter", "I", null, null).visitEnd();

        // JsrFixture(int x) { super(); jsr S; return; S: astore_2; ret 2 }
        MethodVisitor mv = cw.visitMethod(ACC_PUBLIC, "<init>", "(I)V", null, null);
        mv.visitCode();
        Label s0 = new Label();
        mv.visitVarInsn(ALOAD, 0);
        mv.visitMethodInsn(INVOKESPECIAL, "java/lang/Object", "<init>", "()V", false);
        mv.visitJumpInsn(JSR, s0);
        mv.visitInsn(RETURN);
        mv.visitLabel(s0);
        mv.visitVarInsn(ASTORE, 2);
        mv.visitVarInsn(RET, 2);
        mv.visitMaxs(1, 3);
        mv.visitEnd();

        // static int run(int x): try { if (x < 0) throw new IAE(); r = 2x } catch (IAE) { r = -1 }
        // with a "finally" subroutine (counter++) called from both paths.
        mv = cw.visitMethod(ACC_STATIC, "run", "(I)I", null, null);
        mv.visitCode();
        Label start = new Label(), end = new Label(), handler = new Label(), sub = new Label(), ok = new Label();
        mv.visitTryCatchBlock(start, end, handler, "java/lang/IllegalArgumentException");
        mv.visitLabel(start);
        mv.visitVarInsn(ILOAD, 0);
        mv.visitJumpInsn(IFGE, ok);
        mv.visitTypeInsn(NEW, "java/lang/IllegalArgumentException");
        mv.visitInsn(DUP);
        mv.visitMethodInsn(INVOKESPECIAL, "java/lang/IllegalArgumentException", "<init>", "()V", false);
        mv.visitInsn(ATHROW);
        mv.visitLabel(ok);
        mv.visitVarInsn(ILOAD, 0);
        mv.visitInsn(ICONST_2);
        mv.visitInsn(IMUL);
        mv.visitVarInsn(ISTORE, 1);
        mv.visitLabel(end);
        mv.visitJumpInsn(JSR, sub);
        mv.visitVarInsn(ILOAD, 1);
        mv.visitInsn(IRETURN);
        mv.visitLabel(handler);
        mv.visitVarInsn(ASTORE, 3);
        mv.visitInsn(ICONST_M1);
        mv.visitVarInsn(ISTORE, 1);
        mv.visitJumpInsn(JSR, sub);
        mv.visitVarInsn(ILOAD, 1);
        mv.visitInsn(IRETURN);
        mv.visitLabel(sub);
        mv.visitVarInsn(ASTORE, 2);
        mv.visitFieldInsn(GETSTATIC, "JsrFixture", "counter", "I");
        mv.visitInsn(ICONST_1);
        mv.visitInsn(IADD);
        mv.visitFieldInsn(PUTSTATIC, "JsrFixture", "counter", "I");
        mv.visitVarInsn(RET, 2);
        mv.visitMaxs(2, 4);
        mv.visitEnd();

        // static int loop(int n): for (i = 0; i < n; i++) jsr S; S: counter += i
        mv = cw.visitMethod(ACC_STATIC, "loop", "(I)I", null, null);
        mv.visitCode();
        Label head = new Label(), out = new Label(), sub2 = new Label();
        mv.visitInsn(ICONST_0);
        mv.visitVarInsn(ISTORE, 1);
        mv.visitLabel(head);
        mv.visitVarInsn(ILOAD, 1);
        mv.visitVarInsn(ILOAD, 0);
        mv.visitJumpInsn(IF_ICMPGE, out);
        mv.visitJumpInsn(JSR, sub2);
        mv.visitIincInsn(1, 1);
        mv.visitJumpInsn(GOTO, head);
        mv.visitLabel(out);
        mv.visitVarInsn(ILOAD, 1);
        mv.visitInsn(IRETURN);
        mv.visitLabel(sub2);
        mv.visitVarInsn(ASTORE, 2);
        mv.visitFieldInsn(GETSTATIC, "JsrFixture", "counter", "I");
        mv.visitVarInsn(ILOAD, 1);
        mv.visitInsn(IADD);
        mv.visitFieldInsn(PUTSTATIC, "JsrFixture", "counter", "I");
        mv.visitVarInsn(RET, 2);
        mv.visitMaxs(2, 3);
        mv.visitEnd();

        mv = cw.visitMethod(ACC_PUBLIC | ACC_STATIC, "main", "([Ljava/lang/String;)V", null, null);
        mv.visitCode();
        int[][] calls = {{5, 0}, {-3, 0}, {4, 1}};
        for (int[] c : calls) {
            mv.visitFieldInsn(GETSTATIC, "java/lang/System", "out", "Ljava/io/PrintStream;");
            mv.visitIntInsn(BIPUSH, c[0]);
            mv.visitMethodInsn(INVOKESTATIC, "JsrFixture", c[1] == 0 ? "run" : "loop", "(I)I", false);
            mv.visitMethodInsn(INVOKEVIRTUAL, "java/io/PrintStream", "println", "(I)V", false);
        }
        mv.visitTypeInsn(NEW, "JsrFixture");
        mv.visitInsn(DUP);
        mv.visitInsn(ICONST_1);
        mv.visitMethodInsn(INVOKESPECIAL, "JsrFixture", "<init>", "(I)V", false);
        mv.visitInsn(POP);
        mv.visitFieldInsn(GETSTATIC, "java/lang/System", "out", "Ljava/io/PrintStream;");
        mv.visitFieldInsn(GETSTATIC, "JsrFixture", "counter", "I");
        mv.visitMethodInsn(INVOKEVIRTUAL, "java/io/PrintStream", "println", "(I)V", false);
        mv.visitInsn(RETURN);
        mv.visitMaxs(4, 1);
        mv.visitEnd();

        cw.visitEnd();
        Files.write(Paths.get(args[0], "JsrFixture.class"), cw.toByteArray());
    }
}
