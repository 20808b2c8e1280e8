//! Each attack of the suite as an arm of the throughput comparison: prepared (its
//! processes started, its records written) before the window, played inside it, its
//! processes ended after. Seen or unseen, an arm runs the same commands with the same
//! records; the unseen arm's generation is 0, as no jpd wrote one.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::harness::{list, Scene};
use crate::records::{fire, hello, node, thread_slot, thread_tree};
use crate::support::usdt::fake_agent::{write_records, Agent};
use crate::{deep_chain, fake_jvms, far_node, flood, main_class, method_ids, resends, thread_map};

/// A fake agent's start-up before its records are made: the seen one waits for jpd's
/// generation (which the scene gives half a second to settle), the unseen one as long.
const START_UP: Duration = Duration::from_millis(500);

/// The unseen arm's program (the seen one is the scene's own fake agent).
pub(crate) struct Programs {
    pub unseen: PathBuf,
}

#[derive(Clone, Copy)]
pub(crate) enum Attack {
    FarNode,
    Flood,
    Resends,
    FakeJvms,
    ThreadMap,
    MethodIds,
    DeepChain,
    Names,
}

impl Attack {
    pub(crate) const ALL: [Attack; 8] = [
        Attack::FarNode,
        Attack::Flood,
        Attack::Resends,
        Attack::FakeJvms,
        Attack::ThreadMap,
        Attack::MethodIds,
        Attack::DeepChain,
        Attack::Names,
    ];

    /// The attack's name in the measure file.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Attack::FarNode => "far_node",
            Attack::Flood => "flood",
            Attack::Resends => "resends",
            Attack::FakeJvms => "fake_jvms",
            Attack::ThreadMap => "thread_map",
            Attack::MethodIds => "method_ids",
            Attack::DeepChain => "deep_chain",
            Attack::Names => "main_class",
        }
    }

    /// Starts the attack's processes and makes their records (none of it in the window).
    pub(crate) fn prepare<'a>(
        self,
        scene: &'a Scene,
        programs: &'a Programs,
        seen: bool,
    ) -> Prepared<'a> {
        let mut prepared = Prepared {
            attack: self,
            scene,
            programs,
            seen,
            agents: Vec::new(),
            generations: Vec::new(),
            records: Vec::new(),
        };
        let agents = match self {
            Attack::FakeJvms => 0,
            Attack::Flood => flood::FLOODERS,
            Attack::ThreadMap => 2,
            _ => 1,
        };
        for index in 0..agents {
            let (mut agent, generation) = prepared.start_agent();
            let records = self.records(scene, index, &mut agent, generation);
            if let Attack::Flood = self {
                write_records(&prepared.file(index), &records);
            }
            prepared.agents.push(agent);
            prepared.generations.push(generation);
            prepared.records.push(records);
        }
        prepared
    }

    /// The records the attack's `index`-th agent fires (its threads started first when
    /// the attack needs them).
    fn records(
        self,
        scene: &Scene,
        index: usize,
        agent: &mut Agent,
        generation: u64,
    ) -> Vec<Vec<u8>> {
        let pid = agent.pid;
        match self {
            Attack::FarNode => {
                let mut records = vec![hello(pid, generation, b"FarNodes")];
                for t in 1..=far_node::THREADS {
                    // The program answers on its main thread: its id is the pid.
                    records.push(thread_slot(pid, generation, t, pid, 0x1000 * t));
                    let far = [node(far_node::FAR, 0, 1)];
                    records.extend(thread_tree(pid, generation, t, b"far", &far, true));
                }
                records
            }
            Attack::Flood => vec![hello(pid, generation, &[b'F'; 4000]); flood::PER_FILE],
            Attack::Resends | Attack::FakeJvms => Vec::new(),
            Attack::ThreadMap if index == 0 => {
                let file = scene.path("tp-threads.tids");
                let slots = thread_map::SLOTS;
                let answer = agent.ask(&format!("threads {slots} {}", file.display()));
                assert_eq!(answer, format!("threads {slots}"), "the filler's threads");
                let tids: Vec<u32> = std::fs::read_to_string(&file)
                    .expect("the filler's thread ids")
                    .lines()
                    .map(|l| l.parse().expect("a thread id"))
                    .collect();
                thread_map::announce(pid, generation, &tids, b"ThreadFiller")
            }
            Attack::ThreadMap => {
                let tids: Vec<u32> = (0..thread_map::SLOTS)
                    .map(|i| thread_map::FIRST_MADE_UP_TID + i)
                    .collect();
                thread_map::announce(pid, generation, &tids, b"MadeUpThreads")
            }
            Attack::MethodIds => method_ids::collider(pid, generation, colliding()),
            Attack::DeepChain => {
                let nodes: Vec<_> = (1..=deep_chain::DEPTH)
                    .map(|i| node(i, i - 1, 1 + i % 7))
                    .collect();
                let mut records = vec![hello(pid, generation, b"DeepChain")];
                records.extend(thread_tree(pid, generation, 1, b"deep", &nodes, false));
                records
            }
            Attack::Names => main_class::names(pid, generation),
        }
    }
}

/// An attack ready to play.
pub(crate) struct Prepared<'a> {
    attack: Attack,
    scene: &'a Scene,
    programs: &'a Programs,
    seen: bool,
    agents: Vec<Agent>,
    /// The generation each agent's records answer.
    generations: Vec<u64>,
    /// What each agent fires.
    records: Vec<Vec<Vec<u8>>>,
}

impl Prepared<'_> {
    /// The attack's processes started so far.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.agents.iter().map(|a| a.pid).collect()
    }

    fn command(&self) -> Command {
        if self.seen {
            return self.scene.fake_command();
        }
        let mut c = Command::new(&self.programs.unseen);
        c.env_remove("LD_LIBRARY_PATH");
        c
    }

    /// A fake agent and the generation its records answer (0 when unseen: none came).
    fn start_agent(&self) -> (Agent, u64) {
        if self.seen {
            let (agent, _, generation) = self.scene.fake_agent();
            return (agent, generation);
        }
        let agent = Agent::spawn(self.command());
        std::thread::sleep(START_UP);
        (agent, 0)
    }

    /// The file agent `index` fires its records through.
    fn file(&self, index: usize) -> PathBuf {
        self.scene
            .path(&format!("tp-{}-{index}.rec", self.attack.key()))
    }

    /// Plays the attack: what fires at once is fired here, what goes on until `until`
    /// runs on threads of its own.
    pub(crate) fn run(mut self, until: Instant) -> Attackers {
        let mut attackers = Attackers::default();
        match self.attack {
            Attack::Flood => {
                let agents = std::mem::take(&mut self.agents);
                for (index, mut agent) in agents.into_iter().enumerate() {
                    let fire = format!("fire {}", self.file(index).display());
                    attackers.held.push(agent.pid);
                    // Two commands queued at all times: the flooder never waits for
                    // this thread, so it is busy in both arms, seen or not.
                    attackers.threads.push(std::thread::spawn(move || {
                        agent.send(&fire);
                        while Instant::now() < until {
                            agent.send(&fire);
                            agent.answer(&fire);
                        }
                        agent.answer(&fire);
                    }));
                }
            }
            Attack::Resends => {
                let mut agent = self.agents.remove(0);
                let (pid, file) = (agent.pid, self.file(0));
                let mut generation = self.generations[0];
                attackers.held.push(pid);
                // Killed at the end, waiting for a generation: its thread then fails.
                attackers.threads.push(std::thread::spawn(move || loop {
                    fire(&mut agent, &file, &resends::lossy_state(pid, generation));
                    let answer = agent.ask(&format!("gen_after {generation}"));
                    generation = answer
                        .strip_prefix("gen ")
                        .and_then(|g| g.parse().ok())
                        .expect("gen N");
                }));
            }
            Attack::FakeJvms => {
                for _ in 0..fake_jvms::FAKES {
                    let mut c = self.command();
                    c.uid(fake_jvms::ATTACKER_UID).gid(fake_jvms::ATTACKER_UID);
                    attackers.agents.push(Agent::spawn(c));
                }
            }
            _ => {
                for (index, records) in self.records.iter().enumerate() {
                    let file = self.file(index);
                    let n = fire(&mut self.agents[index], &file, records);
                    assert_eq!(n, if self.seen { records.len() as u64 } else { 0 });
                }
                self.after_firing();
            }
        }
        attackers.agents.append(&mut self.agents);
        attackers
    }

    /// What a caller asks of jpd once the records are in: the deep chain's pprof, the
    /// names through `jvm list`. The unseen arm asks the same (jpd has nothing to show).
    fn after_firing(&self) {
        let jpctl = |args: &[&str]| {
            let mut c = self.scene.jpd.jpctl();
            let _ = c.args(args).output();
        };
        let pid = self.agents[0].pid.to_string();
        match self.attack {
            Attack::DeepChain => {
                std::thread::sleep(Duration::from_millis(200));
                let out = self.scene.path("tp-deep.pb.gz");
                let out = out.to_string_lossy();
                jpctl(&["jvm", "export", &pid, "--format", "pprof", "-o", &out]);
            }
            Attack::Names => jpctl(&["jvm", "list"]),
            _ => {}
        }
    }
}
/// The 60 000 colliding method ids, found once (a search over a billion ids).
fn colliding() -> &'static [u32] {
    static MIDS: OnceLock<Vec<u32>> = OnceLock::new();
    MIDS.get_or_init(|| method_ids::colliding_mids(method_ids::NODES))
}

/// The processes of an arm, ended after its window.
#[derive(Default)]
pub(crate) struct Attackers {
    agents: Vec<Agent>,
    /// Processes whose agent a thread of the attack holds: killed by pid, reaped here.
    held: Vec<u32>,
    threads: Vec<JoinHandle<()>>,
}

impl Attackers {
    pub(crate) fn pids(&self) -> Vec<u32> {
        let mut pids = self.held.clone();
        pids.extend(self.agents.iter().map(|a| a.pid));
        pids
    }

    /// Kills every process of the arm and reaps it.
    pub(crate) fn end(mut self) {
        for &pid in &self.held {
            // SAFETY: kill and waitpid on our own child, which nothing else reaps (its
            // `Child` is in a thread that only reads and writes its pipes).
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
                libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
            }
        }
        for t in self.threads.drain(..) {
            // A thread whose agent was killed under it fails: that is its end.
            let _ = t.join();
        }
        for mut agent in self.agents.drain(..) {
            let _ = agent.child.kill();
            let _ = agent.child.wait();
        }
    }
}

/// Whether jpd lists any of `pids`.
pub(crate) fn any_listed(scene: &Scene, pids: &[u32]) -> bool {
    list(&scene.jpd).iter().any(|j| {
        j["pid"]
            .as_u64()
            .is_some_and(|p| pids.iter().any(|&q| u64::from(q) == p))
    })
}
