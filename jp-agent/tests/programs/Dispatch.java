// Interfaces, abstract classes, default and static interface methods, virtual dispatch.
public class Dispatch {
    interface Shape {
        double area();
        default String describe() { return kind() + ":" + (int) area(); }
        String kind();
        static Shape unit() { return new Square(1); }
    }

    static abstract class Base implements Shape {
        public String kind() { return getClass().getSimpleName(); }
    }

    static class Square extends Base {
        final double s;
        Square(double s) { this.s = s; }
        public double area() { return s * s; }
    }

    static class Circle extends Base {
        final double r;
        Circle(double r) { this.r = r; }
        public double area() { return 3 * r * r; }
        @Override public String kind() { return "circle"; }
    }

    static class Tri implements Shape {
        public double area() { return 0.5; }
        public String kind() { return "tri"; }
        @Override public String describe() { return "triangle"; }
    }

    public static void main(String[] args) {
        Shape[] shapes = { new Square(2), new Circle(1), new Tri(), Shape.unit(), new Circle(2) };
        StringBuilder sb = new StringBuilder();
        double total = 0;
        for (int round = 0; round < 3; round++) {
            for (Shape s : shapes) {
                total += s.area();
                sb.append(s.describe()).append(' ');
            }
        }
        System.out.println(sb.toString().trim());
        System.out.println(total);
        Object o = shapes[1];
        System.out.println(o.toString().startsWith("Dispatch$Circle"));
    }
}
