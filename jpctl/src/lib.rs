//! jpctl: the command-line client of jpd, and its live `top` view.
pub mod client;
pub mod diff;
pub mod diff_cmd;
pub mod errors;
pub mod jvm;
pub mod kernel_flame;
pub mod output;
pub mod tls;
pub mod top;
