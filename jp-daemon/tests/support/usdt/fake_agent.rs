//! A fake agent: a C shared object with the agent's USDT probe `jp:record(addr, len)`
//! (with its semaphore) and the exported control block `jp_usdt_control`, and a C
//! program that loads it and fires what the test tells it to on stdin. Plus a
//! recording sink for the collector. Needs gcc and systemtap-sdt-dev.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use jp_common::wire::{EventHeader, CONTROL_MAGIC};
use jp_daemon::store::jvm::sink::RecordSink;
use jp_daemon::store::jvm::{ProcessInfo, UsdtKernelCounters};

const LIB_C: &str = r#"
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <stdint.h>

unsigned short jp_record_semaphore __attribute__((unused)) __attribute__((section(".probes")));

struct jp_control { uint64_t magic; volatile uint64_t generation; uint64_t reserved[6]; };
__attribute__((visibility("default"))) struct jp_control jp_usdt_control = { JP_MAGIC, 0, {0} };

/* Fires the probe if someone listens; returns whether it fired. */
__attribute__((noinline)) int jp_fire(const void *addr, unsigned long len) {
    if (!jp_record_semaphore)
        return 0;
    STAP_PROBE2(jp, record, addr, len);
    return 1;
}
unsigned short jp_semaphore(void) { return jp_record_semaphore; }
uint64_t jp_generation(void) { return jp_usdt_control.generation; }
"#;

/// Commands, one per line: `wait` (semaphore set and a generation written), `gen_after
/// G` (a generation other than G), `fire PATH` (records in PATH, each a u32 LE length
/// then the bytes), `long N`, `bad N` (address 16), `flood N SIZE`, `threads N PATH` (N more
/// threads that sleep until exit, their ids written to PATH, one a line), `sema`, `exit`.
/// Each answers one line.
const PROG_C: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <pthread.h>

int jp_fire(const void *addr, unsigned long len);
unsigned short jp_semaphore(void);
uint64_t jp_generation(void);

static volatile pid_t *thread_ids;
static volatile long threads_started;

static void *sleeper(void *arg) {
    thread_ids[(long)arg] = gettid();
    __atomic_add_fetch(&threads_started, 1, __ATOMIC_SEQ_CST);
    for (;;)
        pause();
    return NULL;
}

/* Starts n threads with small stacks; writes their ids to path. */
static long start_threads(long n, const char *path) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    thread_ids = calloc(n, sizeof(pid_t));
    threads_started = 0;
    long made = 0;
    for (long i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, sleeper, (void *)i) != 0)
            break;
        made++;
    }
    while (threads_started < made)
        usleep(1000);
    FILE *f = fopen(path, "w");
    for (long i = 0; f && i < made; i++)
        fprintf(f, "%d\n", thread_ids[i]);
    if (f)
        fclose(f);
    return made;
}

int main(void) {
    char line[4096];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("pid %d\n", getpid());
    while (fgets(line, sizeof line, stdin)) {
        char path[4000];
        unsigned long long a = 0, b = 0;
        if (strncmp(line, "wait", 4) == 0) {
            while (!jp_semaphore() || !jp_generation())
                usleep(1000);
            printf("ready tid %d gen %llu sema %u\n", gettid(),
                   (unsigned long long)jp_generation(), jp_semaphore());
        } else if (sscanf(line, "gen_after %llu", &a) == 1) {
            while (jp_generation() == a)
                usleep(1000);
            printf("gen %llu\n", (unsigned long long)jp_generation());
        } else if (sscanf(line, "fire %3999s", path) == 1) {
            FILE *f = fopen(path, "rb");
            long fired = 0;
            uint32_t len;
            while (f && fread(&len, 4, 1, f) == 1) {
                char *buf = malloc(len ? len : 1);
                if (fread(buf, 1, len, f) != len) { free(buf); break; }
                fired += jp_fire(buf, len);
                free(buf);
            }
            if (f) fclose(f);
            printf("fired %ld tid %d\n", fired, gettid());
        } else if (sscanf(line, "long %llu", &a) == 1) {
            char *buf = calloc(1, a);
            printf("fired %d tid %d\n", jp_fire(buf, a), gettid());
            free(buf);
        } else if (sscanf(line, "bad %llu", &a) == 1) {
            printf("fired %d tid %d\n", jp_fire((const void *)16, a), gettid());
        } else if (sscanf(line, "flood %llu %llu", &a, &b) == 2) {
            char *buf = malloc(b);
            long fired = 0;
            for (unsigned long long i = 0; i < a; i++) {
                memset(buf, (int)i, b);
                fired += jp_fire(buf, b);
            }
            free(buf);
            printf("fired %ld tid %d\n", fired, gettid());
        } else if (sscanf(line, "threads %llu %3999s", &a, path) == 2) {
            printf("threads %ld\n", start_threads((long)a, path));
        } else if (strncmp(line, "sema", 4) == 0) {
            printf("sema %u\n", jp_semaphore());
        } else if (strncmp(line, "exit", 4) == 0) {
            return 0;
        } else {
            printf("unknown command\n");
        }
    }
    return 0;
}
"#;

/// Builds `dir/LIBRARY` and `dir/jp_fake_agent` (which finds the library next to
/// itself); fails with what to install if the compiler or `sys/sdt.h` is missing.
pub fn build(dir: &Path, library: &str) -> (PathBuf, PathBuf) {
    let lib_c = dir.join("fake_agent_lib.c");
    let prog_c = dir.join("fake_agent_prog.c");
    std::fs::write(&lib_c, LIB_C).unwrap();
    std::fs::write(&prog_c, PROG_C).unwrap();
    let lib = dir.join(library);
    let prog = dir.join("jp_fake_agent");
    let magic = format!("-DJP_MAGIC={CONTROL_MAGIC:#x}ULL");
    let link_name = format!("-l:{library}");
    for args in [
        vec![
            "-O2",
            "-shared",
            "-fPIC",
            &magic,
            "-o",
            lib.to_str().unwrap(),
            lib_c.to_str().unwrap(),
        ],
        vec![
            "-O2",
            "-o",
            prog.to_str().unwrap(),
            prog_c.to_str().unwrap(),
            "-L",
            dir.to_str().unwrap(),
            &link_name,
            "-Wl,-rpath,$ORIGIN",
            // DT_RPATH, not DT_RUNPATH: it wins over LD_LIBRARY_PATH, in which cargo's
            // test runner may list the real libjpagent.so (when the fake library bears
            // the agent's name, the program must still load the fake one beside it).
            "-Wl,--disable-new-dtags",
            "-pthread",
        ],
    ] {
        let out = Command::new("cc")
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run cc ({e}): install the Debian package gcc"));
        assert!(
            out.status.success(),
            "cc {args:?} failed (is Debian systemtap-sdt-dev installed for sys/sdt.h?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (lib, prog)
}

/// A running fake agent.
pub struct Agent {
    pub child: Child,
    pub pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Agent {
    pub fn spawn(mut cmd: Command) -> Agent {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // The program's own view of its pid (another pid namespace would differ);
        // the host pid is the child's.
        assert!(line.starts_with("pid "), "{line:?}");
        let pid = child.id();
        Agent {
            child,
            pid,
            stdin,
            stdout,
        }
    }

    /// Sends a command and returns its answer line.
    pub fn ask(&mut self, command: &str) -> String {
        self.send(command);
        self.answer(command)
    }

    /// Sends a command without waiting for its answer (commands queue in the pipe, so
    /// that the program never waits for the next one).
    pub fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next answer line (to `command`, for the message when there is none).
    pub fn answer(&mut self, command: &str) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "{command}: the fake agent exited");
        line.trim().to_owned()
    }

    /// `fired N tid T` → (N, T).
    pub fn fire(&mut self, command: &str) -> (u64, u32) {
        let answer = self.ask(command);
        let f: Vec<&str> = answer.split_whitespace().collect();
        assert!(
            f.len() == 4 && f[0] == "fired" && f[2] == "tid",
            "{answer:?}"
        );
        (f[1].parse().unwrap(), f[3].parse().unwrap())
    }

    pub fn exit(mut self) {
        writeln!(self.stdin, "exit").unwrap();
        assert!(self.child.wait().unwrap().success());
    }
}

/// Writes records for the `fire` command.
pub fn write_records(path: &Path, records: &[Vec<u8>]) {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(&(r.len() as u32).to_le_bytes());
        out.extend_from_slice(r);
    }
    std::fs::write(path, out).unwrap();
}

/// Everything the collector delivered.
#[derive(Debug, Default)]
pub struct Recording {
    pub events: Vec<(EventHeader, Vec<u8>)>,
    pub found: Vec<(u32, ProcessInfo)>,
    pub generations: Vec<(u32, u64)>,
    pub gone: Vec<u32>,
    /// Handed to the collector at its next tick.
    pub resync: Vec<u32>,
    pub counters: UsdtKernelCounters,
    pub counter_updates: u64,
}

impl Recording {
    pub fn events_of(&self, pid: u32) -> Vec<(EventHeader, Vec<u8>)> {
        self.events
            .iter()
            .filter(|(h, _)| h.tgid == pid)
            .cloned()
            .collect()
    }

    pub fn generations_of(&self, pid: u32) -> Vec<u64> {
        self.generations
            .iter()
            .filter(|(p, _)| *p == pid)
            .map(|(_, g)| *g)
            .collect()
    }
}

impl RecordSink for Recording {
    fn process_found(&mut self, tgid: u32, info: ProcessInfo, _now: SystemTime) {
        self.found.push((tgid, info));
    }
    fn generation_written(&mut self, tgid: u32, generation: u64) {
        self.generations.push((tgid, generation));
    }
    fn ingest(&mut self, event: &EventHeader, record: &[u8], _now: SystemTime) {
        self.events.push((*event, record.to_vec()));
    }
    fn process_gone(&mut self, tgid: u32, _now: SystemTime) {
        self.gone.push(tgid);
    }
    fn take_resync_requests(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.resync)
    }
    fn set_kernel_counters(&mut self, counters: UsdtKernelCounters) {
        self.counters = counters;
        self.counter_updates += 1;
    }
}

/// Waits until `done` holds for the recording; panics with `what` after `timeout`.
pub fn wait_for(
    sink: &Arc<Mutex<Recording>>,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Recording) -> bool,
) {
    let start = Instant::now();
    loop {
        if done(&sink.lock().unwrap()) {
            return;
        }
        if start.elapsed() >= timeout {
            let r = sink.lock().unwrap();
            panic!(
                "timed out waiting for {what}: {} events ({:?} by tgid), counters {:?} ({} updates), found {:?}, generations {:?}, gone {:?}",
                r.events.len(),
                r.events.iter().fold(std::collections::BTreeMap::<u32, usize>::new(), |mut m, (h, _)| {
                    *m.entry(h.tgid).or_default() += 1;
                    m
                }),
                r.counters,
                r.counter_updates,
                r.found.iter().map(|(p, _)| p).collect::<Vec<_>>(),
                r.generations,
                r.gone
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
