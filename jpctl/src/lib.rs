//! jpctl: the command-line client of jpd, and its live `top` view.
//!
//! One layout per command: [`cmd`]`::<command>` holds its arguments, its calls to jpd and
//! where its output goes; [`output`]`::<command>` renders (pure functions to strings);
//! [`top`] is the live view (state and view apart); [`diff`] compares profile files.
pub mod client;
pub mod cmd;
pub mod diff;
pub mod errors;
pub mod output;
pub mod tls;
pub mod top;
