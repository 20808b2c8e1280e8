package jp.rt;

import java.lang.invoke.CallSite;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.invoke.MutableCallSite;

/**
 * Links the calls that pass their context to a static method of another class (see
 * jp-agent/README-dev.md, "Passed contexts across classes"). The rewriter cannot know, when it
 * rewrites the caller, whether the callee's class will have a second body: it is loaded later,
 * perhaps by another loader, perhaps not rewritten at all. So the call goes through a private
 * static stub of the caller's class whose only instruction is an {@code invokedynamic}
 * bootstrapped here. The first call on a site finds out, once the callee's class is loaded;
 * from then on the site calls the second body (the context passed) or, when there is none,
 * the original method after storing the thread's current context (as any call that does not
 * pass it). Either target is constant, so the JIT compiles the call as a direct one.
 *
 * <p>The second bodies stay private (no class grows a method another class could see, and a
 * serializable class keeps its default serialVersionUID): this class reaches them with a
 * private lookup in the callee's class, which unnamed modules always allow.
 */
public final class Link {
    private Link() {}

    private static final MethodHandles.Lookup HERE = MethodHandles.lookup();
    private static final MethodHandle FIRST;
    private static final MethodHandle AT;

    static {
        try {
            FIRST = HERE.findStatic(Link.class, "first",
                    MethodType.methodType(Object.class, Site.class, Object[].class));
            AT = HERE.findStatic(Rt.class, "at", MethodType.methodType(void.class, Node.class));
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /**
     * The bootstrap of a stub's {@code invokedynamic}: {@code name} is the callee's name,
     * {@code owner} the internal name of its class and {@code desc} its descriptor; {@code
     * type} is the stub's, with the context ({@link Node}) as the last argument and every
     * class outside {@code java.} as Object. Owner and types are names, not constants the
     * JVM would resolve, so that nothing is loaded before the first call has stored the
     * thread's current context (a class loader written in Java, or a static initializer, then
     * finds its caller).
     */
    public static CallSite across(MethodHandles.Lookup caller, String name, MethodType type,
            String owner, String desc) {
        return new Site(caller, name, type, owner, desc);
    }

    /** A call site whose first call links it. */
    static final class Site extends MutableCallSite {
        final MethodHandles.Lookup caller;
        final String name;
        final String owner;
        final String desc;

        Site(MethodHandles.Lookup caller, String name, MethodType type, String owner,
                String desc) {
            super(type);
            this.caller = caller;
            this.name = name;
            this.owner = owner;
            this.desc = desc;
            setTarget(FIRST.bindTo(this)
                    .asCollector(Object[].class, type.parameterCount())
                    .asType(type));
        }

        /**
         * The site's target: the callee's second body, or the original method behind a store
         * of the current context. Throws what the original call would throw when it cannot be
         * resolved (then the site stays unlinked, and the next call throws again).
         */
        MethodHandle link() throws ReflectiveOperationException {
            int ctxAt = type().parameterCount() - 1;
            MethodType type;
            try {
                type = MethodType.fromMethodDescriptorString(
                        desc, caller.lookupClass().getClassLoader());
            } catch (TypeNotPresentException e) {
                throw linkage(new NoClassDefFoundError(e.typeName()), e);
            }
            Class<?> x;
            try {
                x = caller.findClass(owner.replace('/', '.'));
            } catch (ClassNotFoundException e) {
                throw linkage(new NoClassDefFoundError(owner), e);
            } catch (IllegalAccessException e) {
                throw linkage(new IllegalAccessError(e.getMessage()), e);
            }
            MethodHandle original;
            try {
                original = caller.findStatic(x, name, type);
            } catch (NoSuchMethodException e) {
                throw linkage(new NoSuchMethodError(owner + "." + name), e);
            } catch (IllegalAccessException e) {
                throw linkage(new IllegalAccessError(e.getMessage()), e);
            }
            MethodHandle second = secondBody(x, original, type.appendParameterTypes(Node.class));
            if (second == null) {
                second = MethodHandles.foldArguments(
                        MethodHandles.dropArguments(original, ctxAt, Node.class), ctxAt, AT);
            }
            return second.asType(type());
        }

        /** The second body of the method the call resolves to, or null (none, or not ours). */
        private MethodHandle secondBody(Class<?> x, MethodHandle original, MethodType type) {
            try {
                MethodHandles.Lookup inX = MethodHandles.privateLookupIn(x, HERE);
                MethodHandle h = inX.findStatic(x, name + "$jp", type);
                // A superclass's second body of a method the owner declares again is not it.
                Class<?> resolved = caller.revealDirect(original).getDeclaringClass();
                return inX.revealDirect(h).getDeclaringClass() == resolved ? h : null;
            } catch (ReflectiveOperationException | RuntimeException e) {
                return null;
            }
        }
    }

    private static Error linkage(Error e, Throwable cause) {
        e.initCause(cause);
        return e;
    }

    /** The first call on a site: links it with the thread's current context right. */
    private static Object first(Site site, Object[] args) throws Throwable {
        Rt.at((Node) args[args.length - 1]);
        MethodHandle target = site.link();
        site.setTarget(target);
        return target.invokeWithArguments(args);
    }
}
