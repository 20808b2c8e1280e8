//! Who asked for a window: kept with it, counted per origin in `/metrics`, labelled in
//! the Pyroscope push. The store owns the type (a window's data); the openers of
//! windows (`windows::service`, the rotation, the HTTP handler) name it.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WindowOrigin {
    /// An explicit request: `jpctl jvm profile`, gRPC `ProfileJvm`.
    Request,
    /// jpd's fleet rotation.
    Rotation,
    /// `/debug/pprof/jvm` (with `export.open_windows = true`).
    Http,
}

impl WindowOrigin {
    pub const ALL: [WindowOrigin; 3] = [
        WindowOrigin::Request,
        WindowOrigin::Rotation,
        WindowOrigin::Http,
    ];

    /// Its name: the `origin` label's value, jpctl's column.
    pub fn label(self) -> &'static str {
        match self {
            WindowOrigin::Request => "request",
            WindowOrigin::Rotation => "rotation",
            WindowOrigin::Http => "http",
        }
    }

    /// Its place in per-origin arrays.
    pub fn index(self) -> usize {
        match self {
            WindowOrigin::Request => 0,
            WindowOrigin::Rotation => 1,
            WindowOrigin::Http => 2,
        }
    }
}
