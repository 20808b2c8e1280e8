// Rebuild the eBPF object when bpf-linker changes (a new linker may produce different
// code); without this cargo only watches the sources.
fn main() {
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(e) => println!("cargo:warning=bpf-linker not found ({e}); run `cargo xtask setup`"),
    }
}
