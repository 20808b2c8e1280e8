//! The few JNI functions the agent uses, called through the JNIEnv function table by slot
//! number (jni.h, `struct JNINativeInterface_`, counting the four reserved slots).

use std::ffi::{c_char, c_void, CStr, CString};

pub type JBoolean = u8;
pub type JInt = i32;
pub type JLong = i64;
pub type JObject = *mut c_void;
pub type JClass = JObject;
pub type JString = JObject;
pub type JMethodId = *mut c_void;
pub type JFieldId = *mut c_void;

/// `JNIEnv*` as passed by the JVM: a pointer to a pointer to the function table.
pub type RawEnv = *mut *const *const c_void;
/// `JavaVM*`.
pub type RawVm = *mut *const *const c_void;

pub const JNI_OK: JInt = 0;

#[repr(C)]
pub struct NativeMethod {
    pub name: *const c_char,
    pub signature: *const c_char,
    pub fn_ptr: *mut c_void,
}

/// Slots of `JNINativeInterface_` (index into the table).
mod slot {
    pub const DEFINE_CLASS: usize = 5;
    pub const FIND_CLASS: usize = 6;
    pub const EXCEPTION_DESCRIBE: usize = 16;
    pub const EXCEPTION_CLEAR: usize = 17;
    pub const NEW_GLOBAL_REF: usize = 21;
    pub const DELETE_GLOBAL_REF: usize = 22;
    pub const DELETE_LOCAL_REF: usize = 23;
    pub const IS_SAME_OBJECT: usize = 24;
    pub const GET_METHOD_ID: usize = 33;
    pub const GET_FIELD_ID: usize = 94;
    pub const GET_INT_FIELD: usize = 100;
    pub const GET_STATIC_METHOD_ID: usize = 113;
    pub const CALL_STATIC_OBJECT_METHOD_A: usize = 116;
    pub const CALL_STATIC_VOID_METHOD_A: usize = 143;
    pub const GET_STATIC_FIELD_ID: usize = 144;
    pub const GET_STATIC_INT_FIELD: usize = 150;
    pub const NEW_STRING_UTF: usize = 167;
    pub const GET_STRING_UTF_CHARS: usize = 169;
    pub const RELEASE_STRING_UTF_CHARS: usize = 170;
    pub const GET_ARRAY_LENGTH: usize = 171;
    pub const GET_INT_ARRAY_REGION: usize = 203;
    pub const GET_LONG_ARRAY_REGION: usize = 204;
    pub const NEW_LONG_ARRAY: usize = 180;
    pub const SET_LONG_ARRAY_REGION: usize = 212;
    pub const REGISTER_NATIVES: usize = 215;
    pub const GET_JAVA_VM: usize = 219;
    pub const EXCEPTION_CHECK: usize = 228;
    pub const NEW_DIRECT_BYTE_BUFFER: usize = 229;
    pub const GET_DIRECT_BUFFER_ADDRESS: usize = 230;
}

/// `JavaVM` invoke-interface slot of `GetEnv`.
const VM_GET_ENV: usize = 6;
/// `JavaVM` invoke-interface slot of `DetachCurrentThread`.
const VM_DETACH_CURRENT_THREAD: usize = 5;
/// `JavaVM` invoke-interface slot of `AttachCurrentThreadAsDaemon`.
const VM_ATTACH_CURRENT_THREAD_AS_DAEMON: usize = 7;

/// `JNI_VERSION_1_6`, what every JDK the agent supports provides.
pub const JNI_VERSION_1_6: JInt = 0x0001_0006;

/// A JNIEnv valid on the current thread for the duration of a JVM callback.
#[derive(Clone, Copy)]
pub struct Env(RawEnv);

/// A `jvalue` argument (only the kinds the agent passes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union JValue {
    pub z: JBoolean,
    pub i: JInt,
    pub j: JLong,
    pub l: JObject,
}

impl Env {
    /// # Safety
    /// `raw` must be the JNIEnv the JVM passed to the current callback on this thread.
    pub unsafe fn from_raw(raw: RawEnv) -> Option<Env> {
        if raw.is_null() {
            None
        } else {
            Some(Env(raw))
        }
    }

    fn fn_ptr(&self, i: usize) -> *const c_void {
        // SAFETY: self.0 is a valid JNIEnv (constructor contract); its first word points at the
        // JNI function table, which has more than 228 entries on every JNI version >= 1.6.
        unsafe { *(*self.0).add(i) }
    }

    /// `DefineClass` into the boot loader (a null loader): the class lives in the boot
    /// loader's dictionary and unnamed module, as if found on its search path. A failure is
    /// reported (the pending exception printed) and gives `None`.
    pub fn define_boot_class(&self, name: &str, bytes: &[u8]) -> Option<JClass> {
        let name = CString::new(name).ok()?;
        let len = JInt::try_from(bytes.len()).ok()?;
        type F =
            unsafe extern "system" fn(RawEnv, *const c_char, JObject, *const i8, JInt) -> JClass;
        // SAFETY: slot DEFINE_CLASS has this signature (jni.h).
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::DEFINE_CLASS)) };
        // SAFETY: valid env, NUL-terminated name, a null loader (the boot loader), and a
        // buffer of len bytes that the JVM only reads during the call.
        let c = unsafe {
            f(
                self.0,
                name.as_ptr(),
                std::ptr::null_mut(),
                bytes.as_ptr().cast(),
                len,
            )
        };
        if c.is_null() {
            self.clear_exception(true);
            None
        } else {
            Some(c)
        }
    }

    pub fn find_class(&self, name: &str) -> Option<JClass> {
        self.find_class_impl(name, true)
    }

    /// Like [`Env::find_class`] but a missing class is not reported.
    pub fn try_find_class(&self, name: &str) -> Option<JClass> {
        self.find_class_impl(name, false)
    }

    fn find_class_impl(&self, name: &str, describe: bool) -> Option<JClass> {
        let name = CString::new(name).ok()?;
        type F = unsafe extern "system" fn(RawEnv, *const c_char) -> JClass;
        // SAFETY: slot FIND_CLASS has this signature (jni.h).
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::FIND_CLASS)) };
        // SAFETY: valid env, NUL-terminated name.
        let c = unsafe { f(self.0, name.as_ptr()) };
        if c.is_null() {
            self.clear_exception(describe);
            None
        } else {
            Some(c)
        }
    }

    /// Returns whether an exception was pending; describes (prints) it if `describe`.
    pub fn clear_exception(&self, describe: bool) -> bool {
        type Check = unsafe extern "system" fn(RawEnv) -> u8;
        type Void = unsafe extern "system" fn(RawEnv);
        // SAFETY: slots with these signatures (jni.h).
        let check: Check = unsafe { std::mem::transmute(self.fn_ptr(slot::EXCEPTION_CHECK)) };
        // SAFETY: valid env.
        if unsafe { check(self.0) } == 0 {
            return false;
        }
        if describe {
            // SAFETY: as above; ExceptionDescribe also clears the exception.
            let d: Void = unsafe { std::mem::transmute(self.fn_ptr(slot::EXCEPTION_DESCRIBE)) };
            // SAFETY: valid env, pending exception.
            unsafe { d(self.0) };
        }
        // SAFETY: as above.
        let c: Void = unsafe { std::mem::transmute(self.fn_ptr(slot::EXCEPTION_CLEAR)) };
        // SAFETY: valid env.
        unsafe { c(self.0) };
        true
    }

    pub fn static_method(&self, class: JClass, name: &str, sig: &str) -> Option<JMethodId> {
        let name = CString::new(name).ok()?;
        let sig = CString::new(sig).ok()?;
        type F =
            unsafe extern "system" fn(RawEnv, JClass, *const c_char, *const c_char) -> JMethodId;
        // SAFETY: slot GET_STATIC_METHOD_ID has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_STATIC_METHOD_ID)) };
        // SAFETY: valid env, class ref, NUL-terminated strings.
        let m = unsafe { f(self.0, class, name.as_ptr(), sig.as_ptr()) };
        if m.is_null() {
            self.clear_exception(true);
            None
        } else {
            Some(m)
        }
    }

    /// An instance method's id (any access: JNI ignores it), None if there is none.
    pub fn method(&self, class: JClass, name: &str, sig: &str) -> Option<JMethodId> {
        self.member_id(slot::GET_METHOD_ID, class, name, sig)
    }

    /// An instance field's id (any access), None if there is none.
    pub fn field(&self, class: JClass, name: &str, sig: &str) -> Option<JFieldId> {
        self.member_id(slot::GET_FIELD_ID, class, name, sig)
    }

    /// A static `int` field's value (any access), None if there is none.
    pub fn static_int(&self, class: JClass, name: &str) -> Option<JInt> {
        let id = self.member_id(slot::GET_STATIC_FIELD_ID, class, name, "I")?;
        type F = unsafe extern "system" fn(RawEnv, JClass, JFieldId) -> JInt;
        // SAFETY: slot GET_STATIC_INT_FIELD has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_STATIC_INT_FIELD)) };
        // SAFETY: valid env; `id` is a static int field of `class`.
        Some(unsafe { f(self.0, class, id) })
    }

    /// The `int` field `field` of `obj`.
    ///
    /// # Safety
    /// `field` must be an `int` field of `obj`'s class (or a superclass), `obj` a live
    /// reference.
    pub unsafe fn int_field(&self, obj: JObject, field: JFieldId) -> JInt {
        type F = unsafe extern "system" fn(RawEnv, JObject, JFieldId) -> JInt;
        // SAFETY: slot GET_INT_FIELD has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_INT_FIELD)) };
        // SAFETY: valid env; the caller's contract on obj and field.
        unsafe { f(self.0, obj, field) }
    }

    /// `GetMethodID`, `GetFieldID` or `GetStaticFieldID` (same signature) by slot.
    fn member_id(&self, slot: usize, class: JClass, name: &str, sig: &str) -> Option<JMethodId> {
        let name = CString::new(name).ok()?;
        let sig = CString::new(sig).ok()?;
        type F =
            unsafe extern "system" fn(RawEnv, JClass, *const c_char, *const c_char) -> *mut c_void;
        // SAFETY: the three slots the callers pass have this signature (jni.h).
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot)) };
        // SAFETY: valid env, class ref, NUL-terminated strings.
        let id = unsafe { f(self.0, class, name.as_ptr(), sig.as_ptr()) };
        if id.is_null() {
            self.clear_exception(false);
            None
        } else {
            Some(id)
        }
    }

    /// Calls a static void method; returns false (after printing it) if it threw.
    pub fn call_static_void(&self, class: JClass, m: JMethodId, args: &[JValue]) -> bool {
        type F = unsafe extern "system" fn(RawEnv, JClass, JMethodId, *const JValue);
        // SAFETY: slot CALL_STATIC_VOID_METHOD_A has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::CALL_STATIC_VOID_METHOD_A)) };
        // SAFETY: valid env; the caller passes a method id of `class` whose parameters match args.
        unsafe { f(self.0, class, m, args.as_ptr()) };
        !self.clear_exception(true)
    }

    /// Calls a static method returning an object; None (after printing it) if it threw.
    pub fn call_static_object(
        &self,
        class: JClass,
        m: JMethodId,
        args: &[JValue],
    ) -> Option<JObject> {
        type F = unsafe extern "system" fn(RawEnv, JClass, JMethodId, *const JValue) -> JObject;
        // SAFETY: slot CALL_STATIC_OBJECT_METHOD_A has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::CALL_STATIC_OBJECT_METHOD_A)) };
        // SAFETY: valid env; the caller passes a method id of `class` whose parameters match args.
        let r = unsafe { f(self.0, class, m, args.as_ptr()) };
        if self.clear_exception(true) {
            None
        } else {
            Some(r)
        }
    }

    pub fn is_same_object(&self, a: JObject, b: JObject) -> bool {
        type F = unsafe extern "system" fn(RawEnv, JObject, JObject) -> u8;
        // SAFETY: slot IS_SAME_OBJECT has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::IS_SAME_OBJECT)) };
        // SAFETY: valid env; both are valid references or null.
        unsafe { f(self.0, a, b) != 0 }
    }

    pub fn new_global_ref(&self, o: JObject) -> JObject {
        type F = unsafe extern "system" fn(RawEnv, JObject) -> JObject;
        // SAFETY: slot NEW_GLOBAL_REF has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::NEW_GLOBAL_REF)) };
        // SAFETY: valid env and reference (null gives null).
        unsafe { f(self.0, o) }
    }

    pub fn delete_global_ref(&self, o: JObject) {
        type F = unsafe extern "system" fn(RawEnv, JObject);
        // SAFETY: slot DELETE_GLOBAL_REF has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::DELETE_GLOBAL_REF)) };
        // SAFETY: o is a global ref created by new_global_ref and not deleted before.
        unsafe { f(self.0, o) }
    }

    pub fn delete_local_ref(&self, o: JObject) {
        if o.is_null() {
            return;
        }
        type F = unsafe extern "system" fn(RawEnv, JObject);
        // SAFETY: slot DELETE_LOCAL_REF has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::DELETE_LOCAL_REF)) };
        // SAFETY: o is a live local ref of this frame.
        unsafe { f(self.0, o) }
    }

    pub fn new_string(&self, s: &str) -> JString {
        // Modified UTF-8 differs from UTF-8 only for NUL and supplementary characters, which
        // class and method names here do not contain; a NUL makes CString fail -> null.
        let Ok(c) = CString::new(s) else {
            return std::ptr::null_mut();
        };
        type F = unsafe extern "system" fn(RawEnv, *const c_char) -> JString;
        // SAFETY: slot NEW_STRING_UTF has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::NEW_STRING_UTF)) };
        // SAFETY: valid env, NUL-terminated string.
        let r = unsafe { f(self.0, c.as_ptr()) };
        if r.is_null() {
            self.clear_exception(false);
        }
        r
    }

    pub fn string(&self, s: JString) -> Option<String> {
        if s.is_null() {
            return None;
        }
        type Get = unsafe extern "system" fn(RawEnv, JString, *mut u8) -> *const c_char;
        type Rel = unsafe extern "system" fn(RawEnv, JString, *const c_char);
        // SAFETY: slots with these signatures.
        let get: Get = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_STRING_UTF_CHARS)) };
        // SAFETY: as above.
        let rel: Rel = unsafe { std::mem::transmute(self.fn_ptr(slot::RELEASE_STRING_UTF_CHARS)) };
        // SAFETY: valid env and non-null string ref.
        let p = unsafe { get(self.0, s, std::ptr::null_mut()) };
        if p.is_null() {
            self.clear_exception(false);
            return None;
        }
        // SAFETY: the JVM returns a NUL-terminated modified-UTF-8 buffer, valid until released.
        let out = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        // SAFETY: releasing exactly the buffer obtained above.
        unsafe { rel(self.0, s, p) };
        Some(out)
    }

    pub fn array_len(&self, a: JObject) -> usize {
        if a.is_null() {
            return 0;
        }
        type F = unsafe extern "system" fn(RawEnv, JObject) -> JInt;
        // SAFETY: slot GET_ARRAY_LENGTH has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_ARRAY_LENGTH)) };
        // SAFETY: valid env, non-null array ref.
        usize::try_from(unsafe { f(self.0, a) }).unwrap_or(0)
    }

    pub fn int_array(&self, a: JObject) -> Vec<i32> {
        let n = self.array_len(a);
        let mut v = vec![0i32; n];
        if n > 0 {
            type F = unsafe extern "system" fn(RawEnv, JObject, JInt, JInt, *mut i32);
            // SAFETY: slot GET_INT_ARRAY_REGION has this signature.
            let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_INT_ARRAY_REGION)) };
            // SAFETY: `a` is an int[] of length n (from the Java declaration of the native),
            // v has room for n elements; n fits in jint as it came from GetArrayLength.
            unsafe { f(self.0, a, 0, n as JInt, v.as_mut_ptr()) };
            if self.clear_exception(true) {
                return Vec::new();
            }
        }
        v
    }

    pub fn long_array(&self, a: JObject) -> Vec<i64> {
        let n = self.array_len(a);
        let mut v = vec![0i64; n];
        if n > 0 {
            type F = unsafe extern "system" fn(RawEnv, JObject, JInt, JInt, *mut i64);
            // SAFETY: slot GET_LONG_ARRAY_REGION has this signature.
            let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_LONG_ARRAY_REGION)) };
            // SAFETY: as in int_array, for a long[].
            unsafe { f(self.0, a, 0, n as JInt, v.as_mut_ptr()) };
            if self.clear_exception(true) {
                return Vec::new();
            }
        }
        v
    }

    /// A new `long[]` holding `v` (null if it cannot be made; the exception is cleared).
    pub fn new_long_array(&self, v: &[i64]) -> JObject {
        let Ok(n) = JInt::try_from(v.len()) else {
            return std::ptr::null_mut();
        };
        type New = unsafe extern "system" fn(RawEnv, JInt) -> JObject;
        type Set = unsafe extern "system" fn(RawEnv, JObject, JInt, JInt, *const i64);
        // SAFETY: slot NEW_LONG_ARRAY has this signature.
        let new: New = unsafe { std::mem::transmute(self.fn_ptr(slot::NEW_LONG_ARRAY)) };
        // SAFETY: slot SET_LONG_ARRAY_REGION has this signature.
        let set: Set = unsafe { std::mem::transmute(self.fn_ptr(slot::SET_LONG_ARRAY_REGION)) };
        // SAFETY: valid env; a non-negative length.
        let a = unsafe { new(self.0, n) };
        if a.is_null() {
            self.clear_exception(false);
            return a;
        }
        // SAFETY: `a` is a fresh long[] of n elements; `v` holds n longs.
        unsafe { set(self.0, a, 0, n, v.as_ptr()) };
        a
    }

    /// Registers natives; `methods` must hold (name, signature, function) triples whose
    /// function pointers match the Java declarations.
    pub fn register_natives(&self, class: JClass, methods: &[(&CStr, &CStr, *mut c_void)]) -> bool {
        let table: Vec<NativeMethod> = methods
            .iter()
            .map(|(n, s, f)| NativeMethod {
                name: n.as_ptr(),
                signature: s.as_ptr(),
                fn_ptr: *f,
            })
            .collect();
        type F = unsafe extern "system" fn(RawEnv, JClass, *const NativeMethod, JInt) -> JInt;
        // SAFETY: slot REGISTER_NATIVES has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::REGISTER_NATIVES)) };
        let Ok(n) = JInt::try_from(table.len()) else {
            return false;
        };
        // SAFETY: valid env and class; the table outlives the call (the JVM copies it).
        let rc = unsafe { f(self.0, class, table.as_ptr(), n) };
        if rc != JNI_OK {
            self.clear_exception(true);
            return false;
        }
        true
    }

    /// A direct `java.nio.ByteBuffer` over `len` bytes at `addr` (big-endian order, as
    /// every new ByteBuffer); null on failure.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid memory for as long as Java can reach the buffer.
    pub unsafe fn new_direct_byte_buffer(&self, addr: *mut c_void, len: usize) -> JObject {
        let Ok(len) = JLong::try_from(len) else {
            return std::ptr::null_mut();
        };
        type F = unsafe extern "system" fn(RawEnv, *mut c_void, JLong) -> JObject;
        // SAFETY: slot NEW_DIRECT_BYTE_BUFFER has this signature (JNI 1.4+).
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::NEW_DIRECT_BYTE_BUFFER)) };
        // SAFETY: valid env; the memory contract is the caller's.
        let r = unsafe { f(self.0, addr, len) };
        if r.is_null() {
            self.clear_exception(true);
        }
        r
    }

    /// The address of a direct buffer's memory (null if `buf` is not a direct buffer).
    pub fn direct_buffer_address(&self, buf: JObject) -> *mut c_void {
        if buf.is_null() {
            return std::ptr::null_mut();
        }
        type F = unsafe extern "system" fn(RawEnv, JObject) -> *mut c_void;
        // SAFETY: slot GET_DIRECT_BUFFER_ADDRESS has this signature (JNI 1.4+).
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_DIRECT_BUFFER_ADDRESS)) };
        // SAFETY: valid env and object reference.
        unsafe { f(self.0, buf) }
    }

    pub fn java_vm(&self) -> Option<RawVm> {
        type F = unsafe extern "system" fn(RawEnv, *mut RawVm) -> JInt;
        // SAFETY: slot GET_JAVA_VM has this signature.
        let f: F = unsafe { std::mem::transmute(self.fn_ptr(slot::GET_JAVA_VM)) };
        let mut vm: RawVm = std::ptr::null_mut();
        // SAFETY: valid env, out pointer to a local.
        let rc = unsafe { f(self.0, &mut vm) };
        (rc == JNI_OK && !vm.is_null()).then_some(vm)
    }
}

/// `JavaVM::GetEnv`: returns the interface pointer for `version` (JNI or JVMTI).
///
/// # Safety
/// `vm` must be the JavaVM pointer the JVM handed to the agent.
pub unsafe fn vm_get_env(vm: RawVm, version: JInt) -> Option<*mut c_void> {
    type F = unsafe extern "system" fn(RawVm, *mut *mut c_void, JInt) -> JInt;
    // SAFETY: vm is valid (contract); GetEnv is slot 6 of JNIInvokeInterface_.
    let f: F = unsafe { std::mem::transmute(*(*vm).add(VM_GET_ENV)) };
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid vm, out pointer to a local.
    let rc = unsafe { f(vm, &mut out, version) };
    (rc == JNI_OK && !out.is_null()).then_some(out)
}

/// `JavaVM::AttachCurrentThreadAsDaemon`: makes the calling native thread a Java daemon
/// thread named `name` (so it can call JNI and never holds the VM up); its JNIEnv.
///
/// # Safety
/// `vm` must be the JavaVM pointer the JVM handed to the agent.
pub unsafe fn vm_attach_daemon(vm: RawVm, name: &CStr) -> Option<Env> {
    #[repr(C)]
    struct AttachArgs {
        version: JInt,
        name: *const c_char,
        group: JObject,
    }
    type F = unsafe extern "system" fn(RawVm, *mut RawEnv, *mut AttachArgs) -> JInt;
    // SAFETY: vm is valid (contract); slot VM_ATTACH_CURRENT_THREAD_AS_DAEMON has this signature.
    let f: F = unsafe { std::mem::transmute(*(*vm).add(VM_ATTACH_CURRENT_THREAD_AS_DAEMON)) };
    let mut env: RawEnv = std::ptr::null_mut();
    let mut args = AttachArgs {
        version: JNI_VERSION_1_6,
        name: name.as_ptr(),
        group: std::ptr::null_mut(),
    };
    // SAFETY: valid vm, out pointer to a local, args alive during the call (the JVM copies
    // the name).
    let rc = unsafe { f(vm, &mut env, &mut args) };
    // SAFETY: the JVM returned this thread's JNIEnv.
    (rc == JNI_OK)
        .then(|| unsafe { Env::from_raw(env) })
        .flatten()
}

/// `JavaVM::DetachCurrentThread`, for a thread attached with [`vm_attach_daemon`].
///
/// # Safety
/// `vm` must be the JavaVM pointer the JVM handed to the agent; the calling thread must
/// have no Java frames (a native thread the agent attached).
pub unsafe fn vm_detach(vm: RawVm) {
    type F = unsafe extern "system" fn(RawVm) -> JInt;
    // SAFETY: vm is valid (contract); slot VM_DETACH_CURRENT_THREAD has this signature.
    let f: F = unsafe { std::mem::transmute(*(*vm).add(VM_DETACH_CURRENT_THREAD)) };
    // SAFETY: valid vm, a thread attached by the agent.
    unsafe { f(vm) };
}
