/*
 * jporacle: an independent reference for the jp agent's Method Call Trees.
 *
 * It shares no code and no mechanism with libjpagent.so: it does not rewrite
 * bytecode, it watches the JVM execute it. MethodEntry/MethodExit events keep a
 * shadow stack per thread, and every executed bytecode of an instrumented method
 * produces one event:
 *  - count=bp (default): a JVMTI breakpoint on every instruction of every method
 *    of an instrumented class, set when the class is prepared. Instruction starts
 *    come from decoding GetBytecodes (`wide` + the instruction it modifies is one
 *    instruction, as in the agent's contract).
 *  - count=step: one SingleStep event per executed instruction. Kept as a
 *    cross-check only: HotSpot hides single steps while the interpreter resolves
 *    a constant-pool entry (JvmtiHideSingleStepping), so the bytecodes of a
 *    <clinit> triggered by getstatic/putstatic/invokestatic are lost (with
 *    ClassPrepare events enabled, even more steps vanished); also two consecutive
 *    steps at the same (method, bci) are reported once. Breakpoints have none
 *    of these problems.
 *
 * Semantics (the same rules as the agent's contract, decided here from events):
 *  - only methods of instrumented classes get a node; a class is instrumented
 *    unless it is a JDK class (is_jdk_class: the agent's rule), a jp/ class or a
 *    hidden class (hidden classes never reach a ClassFileLoadHook, so no agent
 *    can rewrite them);
 *  - native methods get no node;
 *  - a frame of an uninstrumented or native method inherits the context of the
 *    frame below it, so an instrumented method called through JDK code, native
 *    code, reflection or a lambda proxy is a child of the nearest instrumented
 *    caller, and <clinit> is a child of the context that triggered it;
 *  - a bytecode is attributed to the node of the frame executing it.
 *
 * One global tree keyed by calling-context path is kept instead of per-thread
 * trees: merging per-thread trees by path (what the agent's file profiler does)
 * gives exactly this tree, and it avoids a merge pass.
 *
 * Each node also records "exc": an exception was thrown in, or propagated
 * through, a frame of that context. Only there may bba=default over-count.
 *
 * Options: out=PATH (required), count=bp|step (default bp), window=CLASS (exact windows,
 * see g_mark). JDK classes are never
 * instrumented (the agent's jdk=false); breakpoints can only be set on classes
 * prepared in the live phase, which holds for every application class.
 * Output: jp-mct/1 JSON with "bba":"oracle", children sorted by method name,
 * plus "oracle_errors": the number of events that did not match the shadow
 * stack (must be 0 for the output to be trusted).
 */
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct MInfo {
    jmethodID id;
    char *name; /* "pkg.Class.name(DESC)" */
    int instrumented;
    int mark; /* window=CLASS: 1 for CLASS.opened, 2 for CLASS.closing, else 0 */
    struct MInfo *next;
} MInfo;

typedef struct Node {
    MInfo *m;
    uint64_t calls;
    uint64_t bytecodes; /* updated with atomic adds: threads share the tree */
    int exc;
    struct Node **kids;
    int nkids, cap;
} Node;

typedef struct Frame {
    jmethodID method;
    MInfo *info;
    Node *node; /* this frame's context (inherited for uninstrumented frames) */
    int win;    /* the window this frame's context began in (0: none; inherited likewise) */
    Node *wnode; /* its context in that window's tree */
} Frame;

typedef struct TState {
    Frame *frames;
    int n, cap;
} TState;

static jvmtiEnv *g_jvmti;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static Node g_root;
static char *g_out;
static int g_step; /* count=step */
static volatile int g_done;
static uint64_t g_errors;
static __thread TState *t_state;

/* window=CLASS: exact windows, opened by a call of CLASS.opened and closed by a call of
 * CLASS.closing (CLASS itself is not instrumented). A window's tree holds the invocations
 * that began inside it, under the path of the instrumented frames that were running when
 * it opened (calls 0, bytecodes 0): what the agent's window must report. Written to
 * OUT.window-N.json at the close. */
static char *g_mark;      /* "CLASS." in dotted form, or NULL */
static int g_win;         /* windows opened so far */
static int g_win_open;
static Node g_wroot;

#define MTAB_SIZE 65536
static MInfo *g_mtab[MTAB_SIZE];

static void die(const char *msg) {
    fprintf(stderr, "jporacle: %s\n", msg);
    exit(3);
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (!q) die("out of memory");
    return q;
}

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* A JDK class, by the same rule as the agent's default jdk=false: defined by the
 * bootstrap or the platform loader, or in a package only the JDK defines
 * (whatever the loader, e.g. reflection accessors generated into their own loaders). */
static jobject g_platform_loader; /* global ref, set at VMInit */

static int is_jdk_class(JNIEnv *env, jclass cls, const char *n) {
    static const char *prefixes[] = {"java/", "jdk/", "sun/", "com/sun/", NULL};
    for (int i = 0; prefixes[i]; i++)
        if (starts_with(n, prefixes[i])) return 1;
    jobject loader = NULL;
    if ((*g_jvmti)->GetClassLoader(g_jvmti, cls, &loader) != JVMTI_ERROR_NONE) return 1;
    if (!loader) return 1;
    int platform = g_platform_loader && env && (*env)->IsSameObject(env, loader, g_platform_loader);
    if (env) (*env)->DeleteLocalRef(env, loader);
    return platform;
}

static void JNICALL on_vm_init(jvmtiEnv *j, JNIEnv *env, jthread th) {
    (void)j, (void)th;
    jclass cl = (*env)->FindClass(env, "java/lang/ClassLoader");
    jmethodID get = cl ? (*env)->GetStaticMethodID(env, cl, "getPlatformClassLoader", "()Ljava/lang/ClassLoader;") : NULL;
    jobject pl = get ? (*env)->CallStaticObjectMethod(env, cl, get) : NULL;
    if (!pl) die("cannot find the platform class loader");
    g_platform_loader = (*env)->NewGlobalRef(env, pl);
}

static void err_event(const char *what, const char *name) {
    __atomic_fetch_add(&g_errors, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&g_errors, __ATOMIC_RELAXED) <= 20)
        fprintf(stderr, "jporacle: inconsistent %s in %s\n", what, name ? name : "?");
}

static MInfo *method_info(JNIEnv *env, jmethodID m) {
    size_t h = ((uintptr_t)m >> 3) % MTAB_SIZE;
    pthread_mutex_lock(&g_lock);
    for (MInfo *e = g_mtab[h]; e; e = e->next)
        if (e->id == m) {
            pthread_mutex_unlock(&g_lock);
            return e;
        }
    pthread_mutex_unlock(&g_lock);

    jclass cls = NULL;
    char *csig = NULL, *mname = NULL, *msig = NULL;
    jint mods = 0;
    MInfo *e = xrealloc(NULL, sizeof *e);
    e->id = m;
    e->instrumented = 0;
    e->mark = 0;
    if ((*g_jvmti)->GetMethodDeclaringClass(g_jvmti, m, &cls) != JVMTI_ERROR_NONE ||
        (*g_jvmti)->GetClassSignature(g_jvmti, cls, &csig, NULL) != JVMTI_ERROR_NONE ||
        (*g_jvmti)->GetMethodName(g_jvmti, m, &mname, &msig, NULL) != JVMTI_ERROR_NONE ||
        (*g_jvmti)->GetMethodModifiers(g_jvmti, m, &mods) != JVMTI_ERROR_NONE) {
        e->name = strdup("?");
    } else {
        /* csig is "Lpkg/Class;"; a hidden class's is "Lpkg/Class$$Lambda.0x…;" (a '.'). */
        size_t cl = strlen(csig);
        char *cname = strndup(csig + 1, cl >= 2 ? cl - 2 : 0);
        int hidden = strchr(cname, '.') != NULL;
        int jdk = is_jdk_class(env, cls, cname);
        e->instrumented = !(mods & 0x0100 /* ACC_NATIVE */) && !hidden && !starts_with(cname, "jp/") &&
                          !jdk;
        size_t len = strlen(cname) + strlen(mname) + strlen(msig) + 2;
        e->name = xrealloc(NULL, len);
        for (char *p = cname; *p; p++)
            if (*p == '/') *p = '.';
        snprintf(e->name, len, "%s.%s%s", cname, mname, msig);
        free(cname);
        if (g_mark && starts_with(e->name, g_mark)) {
            e->instrumented = 0;
            const char *rest = e->name + strlen(g_mark);
            e->mark = starts_with(rest, "opened(") ? 1 : starts_with(rest, "closing(") ? 2 : 0;
        }
    }
    if (cls && env) (*env)->DeleteLocalRef(env, cls);
    if (csig) (*g_jvmti)->Deallocate(g_jvmti, (unsigned char *)csig);
    if (mname) (*g_jvmti)->Deallocate(g_jvmti, (unsigned char *)mname);
    if (msig) (*g_jvmti)->Deallocate(g_jvmti, (unsigned char *)msig);

    pthread_mutex_lock(&g_lock);
    for (MInfo *o = g_mtab[h]; o; o = o->next)
        if (o->id == m) { /* another thread won the race */
            pthread_mutex_unlock(&g_lock);
            free(e->name);
            free(e);
            return o;
        }
    e->next = g_mtab[h];
    g_mtab[h] = e;
    pthread_mutex_unlock(&g_lock);
    return e;
}

static TState *state(void) {
    if (!t_state) {
        t_state = xrealloc(NULL, sizeof *t_state);
        t_state->n = 0;
        t_state->cap = 64;
        t_state->frames = xrealloc(NULL, 64 * sizeof(Frame));
    }
    return t_state;
}

static Node *child(Node *parent, MInfo *m) {
    for (int i = 0; i < parent->nkids; i++)
        if (parent->kids[i]->m == m) return parent->kids[i];
    Node *c = xrealloc(NULL, sizeof *c);
    memset(c, 0, sizeof *c);
    c->m = m;
    if (parent->nkids == parent->cap) {
        parent->cap = parent->cap ? parent->cap * 2 : 4;
        parent->kids = xrealloc(parent->kids, parent->cap * sizeof(Node *));
    }
    parent->kids[parent->nkids++] = c;
    return c;
}

static void write_children(FILE *f, Node *n);

/* The open window's tree to OUT.window-N.json (under g_lock). */
static void write_window(void) {
    size_t len = strlen(g_out) + 32;
    char *path = xrealloc(NULL, len);
    snprintf(path, len, "%s.window-%d.json", g_out, g_win);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "jporacle: cannot write %s\n", path);
        free(path);
        return;
    }
    fprintf(f, "{\"format\":\"jp-mct/1\",\"bba\":\"oracle\",\"oracle_errors\":%llu,\"root\":{",
            (unsigned long long)g_errors);
    write_children(f, &g_wroot);
    fputs("}}\n", f);
    fclose(f);
    free(path);
}

/* The window context of a new invocation's caller: the caller's, if it began in the open
 * window, else the path of the instrumented frames running since before it opened. */
static Node *window_parent(TState *t) {
    if (t->n > 0 && t->frames[t->n - 1].win == g_win) return t->frames[t->n - 1].wnode;
    Node *p = &g_wroot;
    for (int i = 0; i < t->n; i++)
        if (t->frames[i].info->instrumented && t->frames[i].win != g_win) p = child(p, t->frames[i].info);
    return p;
}

static void JNICALL on_method_entry(jvmtiEnv *j, JNIEnv *env, jthread th, jmethodID m) {
    (void)j, (void)env, (void)th;
    if (g_done) return;
    TState *t = state();
    MInfo *mi = method_info(env, m);
    Node *cur = t->n ? t->frames[t->n - 1].node : &g_root;
    Node *node = cur;
    int win = t->n ? t->frames[t->n - 1].win : 0;
    Node *wnode = t->n ? t->frames[t->n - 1].wnode : NULL;
    if (mi->mark) {
        pthread_mutex_lock(&g_lock);
        if (mi->mark == 1 && !g_win_open) {
            g_win++;
            g_win_open = 1;
            memset(&g_wroot, 0, sizeof g_wroot);
        } else if (mi->mark == 2 && g_win_open) {
            write_window();
            g_win_open = 0;
        }
        pthread_mutex_unlock(&g_lock);
    }
    if (mi->instrumented) {
        pthread_mutex_lock(&g_lock);
        node = child(cur, mi);
        node->calls++;
        if (g_win_open) {
            wnode = child(window_parent(t), mi);
            wnode->calls++;
            win = g_win;
        } else {
            win = 0;
            wnode = NULL;
        }
        pthread_mutex_unlock(&g_lock);
    }
    if (t->n == t->cap) {
        t->cap *= 2;
        t->frames = xrealloc(t->frames, t->cap * sizeof(Frame));
    }
    t->frames[t->n++] = (Frame){m, mi, node, win, wnode};
}

static void JNICALL on_method_exit(jvmtiEnv *j, JNIEnv *env, jthread th, jmethodID m, jboolean by_exc, jvalue rv) {
    (void)j, (void)env, (void)th, (void)rv;
    if (g_done) return;
    TState *t = state();
    if (t->n == 0) {
        /* A frame entered before events started (JDK threads at VM start). */
        MInfo *mi = method_info(env, m);
        if (mi->instrumented) err_event("MethodExit on empty stack", mi->name);
        return;
    }
    Frame *top = &t->frames[t->n - 1];
    if (top->method != m) {
        err_event("MethodExit", method_info(env, m)->name);
        return;
    }
    t->n--;
    if (by_exc && t->n > 0) {
        /* The caller's invoke instruction completed abruptly. */
        Frame *caller = &t->frames[t->n - 1];
        if (caller->info->instrumented) __atomic_store_n(&caller->node->exc, 1, __ATOMIC_RELAXED);
    }
}

/* One executed instruction (a SingleStep or a Breakpoint event). */
static void JNICALL on_bytecode(jvmtiEnv *j, JNIEnv *env, jthread th, jmethodID m, jlocation loc) {
    (void)j, (void)env, (void)th, (void)loc;
    if (g_done) return;
    TState *t = state();
    if (t->n > 0 && t->frames[t->n - 1].method == m) {
        Frame *top = &t->frames[t->n - 1];
        if (top->info->instrumented) {
            __atomic_fetch_add(&top->node->bytecodes, 1, __ATOMIC_RELAXED);
            if (g_win_open && top->win == g_win) __atomic_fetch_add(&top->wnode->bytecodes, 1, __ATOMIC_RELAXED);
        }
        return;
    }
    MInfo *mi = method_info(env, m);
    if (mi->instrumented) err_event("bytecode event", mi->name);
}

static void JNICALL on_exception(jvmtiEnv *j, JNIEnv *env, jthread th, jmethodID m, jlocation loc,
                                 jobject exc, jmethodID cm, jlocation cloc) {
    (void)j, (void)env, (void)th, (void)loc, (void)exc, (void)cm, (void)cloc;
    if (g_done) return;
    TState *t = state();
    if (t->n > 0 && t->frames[t->n - 1].method == m) {
        Frame *top = &t->frames[t->n - 1];
        if (top->info->instrumented) __atomic_store_n(&top->node->exc, 1, __ATOMIC_RELAXED);
    } else if (method_info(env, m)->instrumented) {
        err_event("Exception", method_info(env, m)->name);
    }
}

/* Length of the instruction at code[pc], or 0 if it is malformed. `wide` and the
 * instruction it modifies are one instruction. */
static int insn_len(const unsigned char *code, int len, int pc) {
    int op = code[pc];
    if (op <= 0x0f) return 1;                 /* nop .. dconst_1 */
    if (op == 0x10) return 2;                 /* bipush */
    if (op == 0x11) return 3;                 /* sipush */
    if (op == 0x12) return 2;                 /* ldc */
    if (op == 0x13 || op == 0x14) return 3;   /* ldc_w, ldc2_w */
    if (op >= 0x15 && op <= 0x19) return 2;   /* xload index */
    if (op >= 0x1a && op <= 0x35) return 1;   /* xload_n, xaload */
    if (op >= 0x36 && op <= 0x3a) return 2;   /* xstore index */
    if (op >= 0x3b && op <= 0x83) return 1;   /* xstore_n .. lxor */
    if (op == 0x84) return 3;                 /* iinc */
    if (op >= 0x85 && op <= 0x98) return 1;   /* conversions, compares */
    if (op >= 0x99 && op <= 0xa8) return 3;   /* if*, goto, jsr */
    if (op == 0xa9) return 2;                 /* ret */
    if (op == 0xaa || op == 0xab) {           /* tableswitch, lookupswitch */
        int p = (pc + 4) & ~3;                /* skip 0-3 padding bytes */
        if (p + 12 > len) return 0;
#define I32(o) ((int32_t)(((uint32_t)code[o] << 24) | ((uint32_t)code[(o) + 1] << 16) | \
                          ((uint32_t)code[(o) + 2] << 8) | (uint32_t)code[(o) + 3]))
        long n;
        if (op == 0xaa) {
            long lo = I32(p + 4), hi = I32(p + 8);
            if (hi < lo) return 0;
            n = 12 + (hi - lo + 1) * 4;
        } else {
            long pairs = I32(p + 4);
            if (pairs < 0) return 0;
            n = 8 + pairs * 8;
        }
#undef I32
        if (p + n > len) return 0;
        return (int)(p + n - pc);
    }
    if (op >= 0xac && op <= 0xb1) return 1;   /* returns */
    if (op >= 0xb2 && op <= 0xb8) return 3;   /* field access, invokevirtual/special/static */
    if (op == 0xb9 || op == 0xba) return 5;   /* invokeinterface, invokedynamic */
    if (op == 0xbb) return 3;                 /* new */
    if (op == 0xbc) return 2;                 /* newarray */
    if (op == 0xbd) return 3;                 /* anewarray */
    if (op >= 0xbe && op <= 0xbf) return 1;   /* arraylength, athrow */
    if (op == 0xc0 || op == 0xc1) return 3;   /* checkcast, instanceof */
    if (op == 0xc2 || op == 0xc3) return 1;   /* monitorenter/exit */
    if (op == 0xc4) {                         /* wide */
        if (pc + 1 >= len) return 0;
        return code[pc + 1] == 0x84 ? 6 : 4;
    }
    if (op == 0xc5) return 4;                 /* multianewarray */
    if (op == 0xc6 || op == 0xc7) return 3;   /* ifnull, ifnonnull */
    if (op == 0xc8 || op == 0xc9) return 5;   /* goto_w, jsr_w */
    return 0;
}

/* Breakpoints on every instruction of the class's instrumented methods. */
static void JNICALL on_class_prepare(jvmtiEnv *j, JNIEnv *env, jthread th, jclass cls) {
    (void)env, (void)th;
    if (g_step || g_done) return;
    jint n = 0;
    jmethodID *ms = NULL;
    if ((*j)->GetClassMethods(j, cls, &n, &ms) != JVMTI_ERROR_NONE) return;
    for (jint i = 0; i < n; i++) {
        MInfo *mi = method_info(env, ms[i]);
        jint mods = 0;
        if (!mi->instrumented || (*j)->GetMethodModifiers(j, ms[i], &mods) != JVMTI_ERROR_NONE ||
            (mods & 0x0400 /* ACC_ABSTRACT */))
            continue;
        jint len = 0;
        unsigned char *code = NULL;
        if ((*j)->GetBytecodes(j, ms[i], &len, &code) != JVMTI_ERROR_NONE) {
            err_event("GetBytecodes", mi->name);
            continue;
        }
        for (int pc = 0; pc < len;) {
            int l = insn_len(code, len, pc);
            if (l <= 0 || pc + l > len) {
                err_event("bytecode decoding", mi->name);
                break;
            }
            jvmtiError e = (*j)->SetBreakpoint(j, ms[i], pc);
            if (e != JVMTI_ERROR_NONE) err_event("SetBreakpoint", mi->name);
            pc += l;
        }
        (*j)->Deallocate(j, code);
    }
    (*j)->Deallocate(j, (unsigned char *)ms);
}

static int cmp_nodes(const void *a, const void *b) {
    const Node *x = *(Node *const *)a, *y = *(Node *const *)b;
    int c = strcmp(x->m->name, y->m->name);
    if (c) return c;
    if (x->calls != y->calls) return x->calls < y->calls ? -1 : 1;
    if (x->bytecodes != y->bytecodes) return x->bytecodes < y->bytecodes ? -1 : 1;
    return 0;
}

static void write_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void write_children(FILE *f, Node *n) {
    qsort(n->kids, n->nkids, sizeof(Node *), cmp_nodes);
    fputs("\"children\":[", f);
    for (int i = 0; i < n->nkids; i++) {
        Node *c = n->kids[i];
        if (i) fputc(',', f);
        fputs("{\"method\":", f);
        write_str(f, c->m->name);
        fprintf(f, ",\"calls\":%llu,\"bytecodes\":%llu,", (unsigned long long)c->calls,
                (unsigned long long)__atomic_load_n(&c->bytecodes, __ATOMIC_RELAXED));
        if (__atomic_load_n(&c->exc, __ATOMIC_RELAXED)) fputs("\"exc\":true,", f);
        write_children(f, c);
        fputc('}', f);
    }
    fputc(']', f);
}

static void JNICALL on_death(jvmtiEnv *j, JNIEnv *env) {
    (void)j, (void)env;
    pthread_mutex_lock(&g_lock);
    g_done = 1;
    FILE *f = fopen(g_out, "w");
    if (!f) {
        fprintf(stderr, "jporacle: cannot write %s\n", g_out);
        pthread_mutex_unlock(&g_lock);
        return;
    }
    fputs("{\"format\":\"jp-mct/1\",\"bba\":\"oracle\",", f);
    fprintf(f, "\"oracle_errors\":%llu,\"root\":{", (unsigned long long)g_errors);
    write_children(f, &g_root);
    fputs("}}\n", f);
    fclose(f);
    pthread_mutex_unlock(&g_lock);
}

static void check(jvmtiError e, const char *what) {
    if (e != JVMTI_ERROR_NONE) {
        fprintf(stderr, "jporacle: %s failed: JVMTI error %d\n", what, (int)e);
        exit(3);
    }
}

static void parse_options(const char *opts) {
    if (!opts) die("missing options: use -agentpath:libjporacle.so=out=PATH[,count=bp|step]");
    char *s = strdup(opts), *save = NULL;
    for (char *kv = strtok_r(s, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        if (starts_with(kv, "out="))
            g_out = strdup(kv + 4);
        else if (!strcmp(kv, "count=step"))
            g_step = 1;
        else if (!strcmp(kv, "count=bp"))
            g_step = 0;
        else if (starts_with(kv, "window=")) {
            size_t l = strlen(kv + 7) + 2;
            g_mark = xrealloc(NULL, l);
            snprintf(g_mark, l, "%s.", kv + 7);
        }
        else {
            fprintf(stderr, "jporacle: unknown option '%s'\n", kv);
            exit(3);
        }
    }
    free(s);
    if (!g_out) die("option out=PATH is required");
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    (void)reserved;
    parse_options(options);
    if ((*vm)->GetEnv(vm, (void **)&g_jvmti, JVMTI_VERSION_1_2) != JNI_OK) die("no JVMTI 1.2");
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    if (g_step) {
        caps.can_generate_single_step_events = 1;
    } else {
        caps.can_generate_breakpoint_events = 1;
        caps.can_get_bytecodes = 1;
    }
    caps.can_generate_method_entry_events = 1;
    caps.can_generate_method_exit_events = 1;
    caps.can_generate_exception_events = 1;
    check((*g_jvmti)->AddCapabilities(g_jvmti, &caps), "AddCapabilities");
    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.SingleStep = on_bytecode;
    cb.Breakpoint = on_bytecode;
    cb.ClassPrepare = on_class_prepare;
    cb.MethodEntry = on_method_entry;
    cb.MethodExit = on_method_exit;
    cb.Exception = on_exception;
    cb.VMDeath = on_death;
    cb.VMInit = on_vm_init;
    check((*g_jvmti)->SetEventCallbacks(g_jvmti, &cb, sizeof cb), "SetEventCallbacks");
    /* In count=step mode ClassPrepare stays off: enabling it suppressed single steps. */
    jvmtiEvent evs[] = {g_step ? JVMTI_EVENT_SINGLE_STEP : JVMTI_EVENT_BREAKPOINT,
                        g_step ? JVMTI_EVENT_VM_INIT : JVMTI_EVENT_CLASS_PREPARE,
                        JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT,
                        JVMTI_EVENT_EXCEPTION, JVMTI_EVENT_VM_DEATH, JVMTI_EVENT_VM_INIT};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        check((*g_jvmti)->SetEventNotificationMode(g_jvmti, JVMTI_ENABLE, evs[i], NULL), "enable event");
    return JNI_OK;
}
