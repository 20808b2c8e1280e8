//! Empty library target: it lets jp-daemon list jp-ebpf as a build-dependency so that
//! cargo rebuilds jpd when the probes change (the programs are in the `jp-probes` binary).
#![no_std]
