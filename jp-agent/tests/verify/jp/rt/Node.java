package jp.rt;

/** Test stub of the runtime's context type: only its name matters to the verifier. */
public final class Node {
}
