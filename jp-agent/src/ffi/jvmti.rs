//! The few JVMTI functions the agent uses, called through the `jvmtiInterface_1` table by the
//! slot numbers printed in jvmti.h (slot N is at index N-1).

use super::jni::{JClass, JInt, JMethodId, JObject, RawEnv};
use std::ffi::{c_char, c_uchar, c_void, CStr, CString};

pub const JVMTI_VERSION_1_2: JInt = 0x3001_0200;

pub type RawJvmti = *mut *const *const c_void;
pub type JvmtiError = u32;
pub const JVMTI_ERROR_NONE: JvmtiError = 0;

pub const EVENT_VM_INIT: u32 = 50;
pub const EVENT_VM_DEATH: u32 = 51;
pub const EVENT_THREAD_END: u32 = 53;
pub const EVENT_CLASS_FILE_LOAD_HOOK: u32 = 54;
pub const EVENT_CLASS_LOAD: u32 = 55;
/// JDK 21+, with `can_support_virtual_threads`.
pub const EVENT_VIRTUAL_THREAD_END: u32 = 88;
/// `GetClassStatus` bit: the class's initialization failed; it can never run code again,
/// and HotSpot refuses to redefine it (`JVMTI_ERROR_INVALID_CLASS`).
pub const CLASS_STATUS_ERROR: JInt = 8;
const JVMTI_ENABLE: u32 = 1;
const JVMTI_DISABLE: u32 = 0;

/// jvmtiCapabilities: 128 bit-field flags, bit i = flag i in jvmti.h order.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Capabilities([u32; 4]);

impl Capabilities {
    pub const CAN_GENERATE_ALL_CLASS_HOOK_EVENTS: u32 = 26;
    pub const CAN_RETRANSFORM_CLASSES: u32 = 37;
    /// JDK 21+: virtual threads' events (mount, unmount, end) and thread-local storage.
    pub const CAN_SUPPORT_VIRTUAL_THREADS: u32 = 44;

    pub fn set(&mut self, bit: u32) {
        self.0[(bit / 32) as usize] |= 1 << (bit % 32);
    }
    pub fn has(&self, bit: u32) -> bool {
        self.0[(bit / 32) as usize] & (1 << (bit % 32)) != 0
    }
}

pub type VmInitFn = unsafe extern "system" fn(RawJvmti, RawEnv, JObject);
pub type VmDeathFn = unsafe extern "system" fn(RawJvmti, RawEnv);
pub type ThreadFn = unsafe extern "system" fn(RawJvmti, RawEnv, JObject);
pub type ClassFn = unsafe extern "system" fn(RawJvmti, RawEnv, JObject, JClass);
pub type ClassFileLoadHookFn = unsafe extern "system" fn(
    RawJvmti,
    RawEnv,
    JClass,  // class_being_redefined
    JObject, // loader
    *const c_char,
    JObject, // protection domain
    JInt,
    *const c_uchar,
    *mut JInt,
    *mut *mut c_uchar,
);

/// jvmtiEventCallbacks up to event 88 (the JVM copies at most its own struct's size, so a
/// JDK without virtual threads ignores the tail).
#[repr(C)]
#[derive(Default)]
pub struct Callbacks {
    pub vm_init: Option<VmInitFn>,
    pub vm_death: Option<VmDeathFn>,
    pub thread_start: Option<ThreadFn>,
    pub thread_end: Option<ThreadFn>,
    pub class_file_load_hook: Option<ClassFileLoadHookFn>,
    pub class_load: Option<ClassFn>,
    /// Events 56..=86, unused.
    pub unused: [Option<ThreadFn>; 31],
    pub virtual_thread_start: Option<ThreadFn>,
    pub virtual_thread_end: Option<ThreadFn>,
}

/// An extension event's callback as the JVM calls the virtual-thread ones (jvmtiEnv*,
/// JNIEnv*, jthread).
pub type ExtensionThreadFn = unsafe extern "C" fn(RawJvmti, RawEnv, JObject);

/// jvmtiExtensionEventInfo.
#[repr(C)]
struct ExtensionEventInfo {
    index: JInt,
    id: *const c_char,
    description: *const c_char,
    param_count: JInt,
    params: *mut c_void,
}

mod slot {
    pub const SET_EVENT_NOTIFICATION_MODE: usize = 2;
    pub const IS_MODIFIABLE_CLASS: usize = 45;
    pub const ALLOCATE: usize = 46;
    pub const DEALLOCATE: usize = 47;
    pub const GET_CLASS_SIGNATURE: usize = 48;
    pub const GET_CLASS_STATUS: usize = 49;
    pub const GET_CLASS_LOADER: usize = 57;
    pub const GET_LOADED_CLASSES: usize = 78;
    pub const GET_METHOD_NAME: usize = 64;
    pub const GET_METHOD_DECLARING_CLASS: usize = 65;
    pub const GET_STACK_TRACE: usize = 104;
    pub const GET_THREAD_LOCAL_STORAGE: usize = 102;
    pub const SET_THREAD_LOCAL_STORAGE: usize = 103;
    pub const SET_EVENT_CALLBACKS: usize = 122;
    pub const GET_EXTENSION_EVENTS: usize = 125;
    pub const SET_EXTENSION_EVENT_CALLBACK: usize = 126;
    pub const GET_SYSTEM_PROPERTY: usize = 131;
    pub const GET_POTENTIAL_CAPABILITIES: usize = 140;
    pub const ADD_CAPABILITIES: usize = 142;
    pub const ADD_MODULE_EXPORTS: usize = 95;
    pub const ADD_TO_BOOTSTRAP_CLASS_LOADER_SEARCH: usize = 149;
    pub const RETRANSFORM_CLASSES: usize = 152;
}

/// A JVMTI environment. JVMTI functions are callable from any thread.
#[derive(Clone, Copy)]
pub struct Jvmti(RawJvmti);

// SAFETY: a jvmtiEnv pointer may be used from any thread (JVMTI spec, "Function Access").
unsafe impl Send for Jvmti {}
// SAFETY: as above.
unsafe impl Sync for Jvmti {}

fn check(rc: JvmtiError, what: &str) -> Result<(), String> {
    if rc == JVMTI_ERROR_NONE {
        Ok(())
    } else {
        Err(format!("{what} failed: JVMTI error {rc}"))
    }
}

/// `jvmtiFrameInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FrameInfo {
    method: JMethodId,
    location: i64,
}

impl Default for FrameInfo {
    fn default() -> FrameInfo {
        FrameInfo {
            method: std::ptr::null_mut(),
            location: 0,
        }
    }
}

impl Jvmti {
    /// # Safety
    /// `raw` must be a jvmtiEnv obtained from GetEnv and never disposed.
    pub unsafe fn from_raw(raw: *mut c_void) -> Jvmti {
        Jvmti(raw.cast())
    }

    fn fn_ptr(&self, slot: usize) -> *const c_void {
        // SAFETY: self.0 is a valid jvmtiEnv whose first word points at the function table
        // (jvmtiInterface_1, 150+ slots); slot numbers are 1-based.
        unsafe { *(*self.0).add(slot - 1) }
    }

    pub fn potential_capabilities(&self) -> Capabilities {
        type F = unsafe extern "system" fn(RawJvmti, *mut Capabilities) -> JvmtiError;
        // SAFETY: slot GET_POTENTIAL_CAPABILITIES has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_POTENTIAL_CAPABILITIES)) };
        let mut c = Capabilities::default();
        // SAFETY: valid env, out pointer to a 16-byte jvmtiCapabilities.
        unsafe { f(self.0, &mut c) };
        c
    }

    pub fn add_capabilities(&self, caps: &Capabilities) -> Result<(), String> {
        type F = unsafe extern "system" fn(RawJvmti, *const Capabilities) -> JvmtiError;
        // SAFETY: slot ADD_CAPABILITIES has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::ADD_CAPABILITIES)) };
        // SAFETY: valid env and capabilities struct.
        check(unsafe { f(self.0, caps) }, "AddCapabilities")
    }

    pub fn set_callbacks(&self, cb: &Callbacks) -> Result<(), String> {
        type F = unsafe extern "system" fn(RawJvmti, *const Callbacks, JInt) -> JvmtiError;
        // SAFETY: slot SET_EVENT_CALLBACKS has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::SET_EVENT_CALLBACKS)) };
        let size = std::mem::size_of::<Callbacks>() as JInt;
        // SAFETY: the JVM copies `size` bytes, a prefix of jvmtiEventCallbacks.
        check(unsafe { f(self.0, cb, size) }, "SetEventCallbacks")
    }

    pub fn enable(&self, event: u32) -> Result<(), String> {
        type F = unsafe extern "C" fn(RawJvmti, u32, u32, JObject, ...) -> JvmtiError;
        // SAFETY: slot SET_EVENT_NOTIFICATION_MODE has this (variadic) signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::SET_EVENT_NOTIFICATION_MODE)) };
        // SAFETY: valid env; null thread = all threads.
        let rc = unsafe { f(self.0, JVMTI_ENABLE, event, std::ptr::null_mut()) };
        check(rc, &format!("enabling event {event}"))
    }

    pub fn disable(&self, event: u32) -> Result<(), String> {
        type F = unsafe extern "C" fn(RawJvmti, u32, u32, JObject, ...) -> JvmtiError;
        // SAFETY: slot SET_EVENT_NOTIFICATION_MODE has this (variadic) signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::SET_EVENT_NOTIFICATION_MODE)) };
        // SAFETY: valid env; null thread = all threads.
        let rc = unsafe { f(self.0, JVMTI_DISABLE, event, std::ptr::null_mut()) };
        check(rc, &format!("disabling event {event}"))
    }

    /// Sets the callback of the extension event named `id` and enables it; false if this
    /// JVM has no such event.
    pub fn set_extension_callback(&self, id: &str, cb: ExtensionThreadFn) -> Result<bool, String> {
        type Get = unsafe extern "system" fn(
            RawJvmti,
            *mut JInt,
            *mut *mut ExtensionEventInfo,
        ) -> JvmtiError;
        type Set = unsafe extern "system" fn(RawJvmti, JInt, ExtensionThreadFn) -> JvmtiError;
        // SAFETY: slot GET_EXTENSION_EVENTS has this signature (jvmti.h).
        let get: Get = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_EXTENSION_EVENTS)) };
        // SAFETY: slot SET_EXTENSION_EVENT_CALLBACK has this signature (jvmti.h).
        let set: Set =
            unsafe { std::mem::transmute(self.fn_ptr(slot::SET_EXTENSION_EVENT_CALLBACK)) };
        let mut n: JInt = 0;
        let mut infos: *mut ExtensionEventInfo = std::ptr::null_mut();
        // SAFETY: valid env, out pointers to locals.
        check(
            unsafe { get(self.0, &mut n, &mut infos) },
            "GetExtensionEvents",
        )?;
        let mut index = None;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: JVMTI returned an array of `n` infos; each id is a NUL-terminated
            // string it allocated (the strings are left to the JVM: read once at start).
            let info = unsafe { &*infos.add(i) };
            if !info.id.is_null() && unsafe { CStr::from_ptr(info.id) }.to_bytes() == id.as_bytes()
            {
                index = Some(info.index);
            }
        }
        self.deallocate(infos.cast());
        let Some(index) = index else {
            return Ok(false);
        };
        // SAFETY: valid env, an index JVMTI gave, a callback of the event's signature.
        check(
            unsafe { set(self.0, index, cb) },
            "SetExtensionEventCallback",
        )?;
        // HotSpot posts an event whose callback is set only once it is enabled too.
        self.enable(index as u32)?;
        Ok(true)
    }

    pub fn add_to_bootstrap_search(&self, path: &str) -> Result<(), String> {
        let c = CString::new(path).map_err(|_| "path contains NUL".to_string())?;
        type F = unsafe extern "system" fn(RawJvmti, *const c_char) -> JvmtiError;
        // SAFETY: slot ADD_TO_BOOTSTRAP_CLASS_LOADER_SEARCH has this signature.
        let f: F =
            unsafe { std::mem::transmute(self.fn_ptr(slot::ADD_TO_BOOTSTRAP_CLASS_LOADER_SEARCH)) };
        // SAFETY: valid env, NUL-terminated path.
        check(
            unsafe { f(self.0, c.as_ptr()) },
            "AddToBootstrapClassLoaderSearch",
        )
    }

    /// JVMTI AddModuleExports (JVMTI 9): `module` exports `package` (dotted) to `to`.
    pub fn add_module_exports(
        &self,
        module: JObject,
        package: &str,
        to: JObject,
    ) -> Result<(), String> {
        let c = CString::new(package).map_err(|_| "package contains NUL".to_string())?;
        type F = unsafe extern "system" fn(RawJvmti, JObject, *const c_char, JObject) -> JvmtiError;
        // SAFETY: slot ADD_MODULE_EXPORTS has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::ADD_MODULE_EXPORTS)) };
        // SAFETY: valid env, module references from the calling native frame, NUL-terminated
        // package name.
        check(
            unsafe { f(self.0, module, c.as_ptr(), to) },
            "AddModuleExports",
        )
    }

    /// JVMTI Allocate: memory the JVM may take ownership of (ClassFileLoadHook output).
    pub fn allocate(&self, len: usize) -> Option<*mut u8> {
        type F = unsafe extern "system" fn(RawJvmti, i64, *mut *mut u8) -> JvmtiError;
        // SAFETY: slot ALLOCATE has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::ALLOCATE)) };
        let mut p: *mut u8 = std::ptr::null_mut();
        let n = i64::try_from(len).ok()?;
        // SAFETY: valid env, out pointer to a local.
        let rc = unsafe { f(self.0, n, &mut p) };
        (rc == JVMTI_ERROR_NONE && !p.is_null()).then_some(p)
    }

    pub fn deallocate(&self, p: *mut u8) {
        if p.is_null() {
            return;
        }
        type F = unsafe extern "system" fn(RawJvmti, *mut u8) -> JvmtiError;
        // SAFETY: slot DEALLOCATE has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::DEALLOCATE)) };
        // SAFETY: p was allocated by this JVMTI env (Allocate or a JVMTI out parameter).
        unsafe { f(self.0, p) };
    }

    /// A VM system property (as the VM saw it at start: `-D`, `java.vm.version`,
    /// `sun.java.command`…), None if unset or not readable.
    pub fn system_property(&self, name: &str) -> Option<String> {
        let c = CString::new(name).ok()?;
        type F = unsafe extern "system" fn(RawJvmti, *const c_char, *mut *mut c_char) -> JvmtiError;
        // SAFETY: slot GET_SYSTEM_PROPERTY has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_SYSTEM_PROPERTY)) };
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid env, NUL-terminated name, out pointer to a local.
        let rc = unsafe { f(self.0, c.as_ptr(), &mut p) };
        if rc != JVMTI_ERROR_NONE || p.is_null() {
            return None;
        }
        // SAFETY: JVMTI returns a NUL-terminated modified-UTF-8 string it allocated.
        let v = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        self.deallocate(p.cast());
        Some(v)
    }

    pub fn set_thread_local(&self, value: *mut c_void) -> Result<(), String> {
        type F = unsafe extern "system" fn(RawJvmti, JObject, *const c_void) -> JvmtiError;
        // SAFETY: slot SET_THREAD_LOCAL_STORAGE has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::SET_THREAD_LOCAL_STORAGE)) };
        // SAFETY: valid env; null thread = the current thread.
        check(
            unsafe { f(self.0, std::ptr::null_mut(), value) },
            "SetThreadLocalStorage",
        )
    }

    pub fn thread_local(&self, thread: JObject) -> *mut c_void {
        type F = unsafe extern "system" fn(RawJvmti, JObject, *mut *mut c_void) -> JvmtiError;
        // SAFETY: slot GET_THREAD_LOCAL_STORAGE has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_THREAD_LOCAL_STORAGE)) };
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid env and thread ref (or null = current), out pointer to a local.
        let rc = unsafe { f(self.0, thread, &mut p) };
        if rc == JVMTI_ERROR_NONE {
            p
        } else {
            std::ptr::null_mut()
        }
    }

    /// All loaded classes as local refs (the caller deletes them or lets the frame end).
    pub fn loaded_classes(&self) -> Result<Vec<JClass>, String> {
        type F = unsafe extern "system" fn(RawJvmti, *mut JInt, *mut *mut JClass) -> JvmtiError;
        // SAFETY: slot GET_LOADED_CLASSES has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_LOADED_CLASSES)) };
        let mut n: JInt = 0;
        let mut arr: *mut JClass = std::ptr::null_mut();
        // SAFETY: valid env, out pointers to locals.
        check(unsafe { f(self.0, &mut n, &mut arr) }, "GetLoadedClasses")?;
        let mut out = Vec::new();
        if !arr.is_null() {
            let n = usize::try_from(n).unwrap_or(0);
            // SAFETY: the JVM returned an array of n class refs, allocated by JVMTI.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(arr, n) });
            self.deallocate(arr.cast());
        }
        Ok(out)
    }

    pub fn is_modifiable(&self, class: JClass) -> bool {
        type F = unsafe extern "system" fn(RawJvmti, JClass, *mut c_uchar) -> JvmtiError;
        // SAFETY: slot IS_MODIFIABLE_CLASS has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::IS_MODIFIABLE_CLASS)) };
        let mut b: c_uchar = 0;
        // SAFETY: valid env and class ref.
        let rc = unsafe { f(self.0, class, &mut b) };
        rc == JVMTI_ERROR_NONE && b != 0
    }

    /// The class's JVMTI status bits (`CLASS_STATUS_*`); None if JVMTI refused.
    pub fn class_status(&self, class: JClass) -> Option<JInt> {
        type F = unsafe extern "system" fn(RawJvmti, JClass, *mut JInt) -> JvmtiError;
        // SAFETY: slot GET_CLASS_STATUS has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_CLASS_STATUS)) };
        let mut status: JInt = 0;
        // SAFETY: valid env and class ref, out pointer to a local.
        let rc = unsafe { f(self.0, class, &mut status) };
        (rc == JVMTI_ERROR_NONE).then_some(status)
    }

    /// The class's JVM signature, e.g. `Lpkg/Name;`.
    pub fn class_signature(&self, class: JClass) -> Option<String> {
        type F = unsafe extern "system" fn(
            RawJvmti,
            JClass,
            *mut *mut c_char,
            *mut *mut c_char,
        ) -> JvmtiError;
        // SAFETY: slot GET_CLASS_SIGNATURE has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_CLASS_SIGNATURE)) };
        let mut sig: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid env and class ref; null generic pointer is allowed.
        let rc = unsafe { f(self.0, class, &mut sig, std::ptr::null_mut()) };
        if rc != JVMTI_ERROR_NONE || sig.is_null() {
            return None;
        }
        // SAFETY: JVMTI returns a NUL-terminated modified-UTF-8 string.
        let s = unsafe { CStr::from_ptr(sig) }
            .to_string_lossy()
            .into_owned();
        self.deallocate(sig.cast());
        Some(s)
    }

    /// The defining loader (a local ref; null for the bootstrap loader).
    pub fn class_loader(&self, class: JClass) -> JObject {
        type F = unsafe extern "system" fn(RawJvmti, JClass, *mut JObject) -> JvmtiError;
        // SAFETY: slot GET_CLASS_LOADER has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_CLASS_LOADER)) };
        let mut l: JObject = std::ptr::null_mut();
        // SAFETY: valid env and class ref, out pointer to a local.
        let rc = unsafe { f(self.0, class, &mut l) };
        if rc == JVMTI_ERROR_NONE {
            l
        } else {
            std::ptr::null_mut()
        }
    }

    /// The methods of the calling thread's frames from `depth` (0: the innermost, which is
    /// the native method calling this), at most `max`, innermost first.
    pub fn own_stack(&self, depth: JInt, max: usize) -> Vec<JMethodId> {
        let mut buf = vec![FrameInfo::default(); max];
        let n = self.own_frames(depth, &mut buf);
        buf.truncate(n);
        buf.into_iter().map(|fi| fi.method).collect()
    }

    /// Whether `method` runs in one of the calling thread's `N` frames from `depth`: no
    /// allocation (for event callbacks).
    pub fn runs_in<const N: usize>(&self, depth: JInt, method: JMethodId) -> bool {
        let mut buf = [FrameInfo::default(); N];
        let n = self.own_frames(depth, &mut buf);
        buf[..n].iter().any(|f| f.method == method)
    }

    /// `GetStackTrace` of the calling thread into `buf`: the frames filled (0 on error).
    fn own_frames(&self, depth: JInt, buf: &mut [FrameInfo]) -> usize {
        type F = unsafe extern "system" fn(
            RawJvmti,
            JObject,
            JInt,
            JInt,
            *mut FrameInfo,
            *mut JInt,
        ) -> JvmtiError;
        // SAFETY: slot GET_STACK_TRACE has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_STACK_TRACE)) };
        let Ok(max) = JInt::try_from(buf.len()) else {
            return 0;
        };
        let mut n: JInt = 0;
        // SAFETY: valid env; null thread = the current thread; the buffer holds `max` frames.
        let rc = unsafe {
            f(
                self.0,
                std::ptr::null_mut(),
                depth,
                max,
                buf.as_mut_ptr(),
                &mut n,
            )
        };
        if rc != JVMTI_ERROR_NONE {
            return 0;
        }
        usize::try_from(n).unwrap_or(0).min(buf.len())
    }

    /// A method's name and descriptor.
    pub fn method_name(&self, m: JMethodId) -> Option<(String, String)> {
        type F = unsafe extern "system" fn(
            RawJvmti,
            JMethodId,
            *mut *mut c_char,
            *mut *mut c_char,
            *mut *mut c_char,
        ) -> JvmtiError;
        // SAFETY: slot GET_METHOD_NAME has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_METHOD_NAME)) };
        let (mut name, mut sig): (*mut c_char, *mut c_char) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid env and method id; a null generic pointer is allowed.
        let rc = unsafe { f(self.0, m, &mut name, &mut sig, std::ptr::null_mut()) };
        if rc != JVMTI_ERROR_NONE || name.is_null() || sig.is_null() {
            self.deallocate(name.cast());
            self.deallocate(sig.cast());
            return None;
        }
        // SAFETY: JVMTI returns NUL-terminated modified-UTF-8 strings it allocated.
        let out = unsafe {
            (
                CStr::from_ptr(name).to_string_lossy().into_owned(),
                CStr::from_ptr(sig).to_string_lossy().into_owned(),
            )
        };
        self.deallocate(name.cast());
        self.deallocate(sig.cast());
        Some(out)
    }

    /// The class declaring `m` (a local ref).
    pub fn method_class(&self, m: JMethodId) -> Option<JClass> {
        type F = unsafe extern "system" fn(RawJvmti, JMethodId, *mut JClass) -> JvmtiError;
        // SAFETY: slot GET_METHOD_DECLARING_CLASS has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_METHOD_DECLARING_CLASS)) };
        let mut c: JClass = std::ptr::null_mut();
        // SAFETY: valid env and method id, out pointer to a local.
        let rc = unsafe { f(self.0, m, &mut c) };
        (rc == JVMTI_ERROR_NONE && !c.is_null()).then_some(c)
    }

    pub fn retransform(&self, classes: &[JClass]) -> Result<(), String> {
        if classes.is_empty() {
            return Ok(());
        }
        type F = unsafe extern "system" fn(RawJvmti, JInt, *const JClass) -> JvmtiError;
        // SAFETY: slot RETRANSFORM_CLASSES has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::RETRANSFORM_CLASSES)) };
        let n = JInt::try_from(classes.len()).map_err(|e| e.to_string())?;
        // SAFETY: valid env, array of n live class refs.
        check(
            unsafe { f(self.0, n, classes.as_ptr()) },
            "RetransformClasses",
        )
    }
}
