//! The two JDKs every JVM test runs on: Debian's OpenJDK 17 and Temurin 25, from
//! `JP_JDK17`/`JP_JDK25` (`cargo xtask test` sets them), else their install paths.
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jdk {
    J17,
    J25,
}

impl Jdk {
    /// Both, in the order tests run them.
    pub const ALL: [Jdk; 2] = [Jdk::J17, Jdk::J25];

    /// A short name for test output and file names: `jdk17`, `jdk25`.
    pub fn name(self) -> &'static str {
        match self {
            Jdk::J17 => "jdk17",
            Jdk::J25 => "jdk25",
        }
    }

    /// The feature release, as `java.specification.version` says it.
    pub fn feature(self) -> &'static str {
        match self {
            Jdk::J17 => "17",
            Jdk::J25 => "25",
        }
    }

    /// The JDK's home. A JDK that is missing, or lacks the compiler or the JVMTI header
    /// the agent is built against, fails the test (never a skip).
    pub fn home(self) -> PathBuf {
        let (var, default) = match self {
            Jdk::J17 => ("JP_JDK17", "/usr/lib/jvm/java-17-openjdk-amd64"),
            Jdk::J25 => ("JP_JDK25", "/usr/lib/jvm/temurin-25-jdk-amd64"),
        };
        let home = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
        for tool in ["bin/java", "bin/javac", "include/jvmti.h"] {
            assert!(
                home.join(tool).exists(),
                "\n\n*** {} NOT FOUND: {} is missing. Install it (`cargo xtask setup`; JDK 25 is \
                 part of the machine image) or set {var} to its home. The JVM tests must run on \
                 JDK 17 and JDK 25. ***\n",
                self.name(),
                home.join(tool).display()
            );
        }
        home
    }

    /// `bin/java` of [`Jdk::home`].
    pub fn java(self) -> PathBuf {
        self.home().join("bin/java")
    }
}
