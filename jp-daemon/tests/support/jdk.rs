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

    /// The JDK's home. Fails (never skips) when it is not installed.
    pub fn home(self) -> PathBuf {
        let (var, default) = match self {
            Jdk::J17 => ("JP_JDK17", "/usr/lib/jvm/java-17-openjdk-amd64"),
            Jdk::J25 => ("JP_JDK25", "/usr/lib/jvm/temurin-25-jdk-amd64"),
        };
        let home = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
        assert!(
            home.join("bin/javac").exists(),
            "\n\n*** {var}: no JDK at {} — install it (`cargo xtask setup`; JDK 25 is part of \
             the machine image) or set {var}. The JVM tests must run on JDK 17 and JDK 25. ***\n",
            home.display()
        );
        home
    }

    /// The feature release, as `java.specification.version` says it.
    pub fn feature(self) -> &'static str {
        match self {
            Jdk::J17 => "17",
            Jdk::J25 => "25",
        }
    }
}
