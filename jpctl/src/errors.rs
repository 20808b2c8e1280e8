//! Errors worded for the terminal, shared by the Unix-socket and the TLS transports.

/// The innermost error's text: for a missing socket that is the OS error, which
/// is what the user needs ("No such file or directory", "Permission denied").
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// A failed RPC in plain words: the code and jpd's message.
pub fn rpc_failure(s: &tonic::Status) -> String {
    if s.message().is_empty() {
        format!("jpd answered {:?}", s.code())
    } else {
        format!("jpd answered {:?}: {}", s.code(), s.message())
    }
}
