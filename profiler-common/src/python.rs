//! CPython processes as the BPF sampler walks them: where the interpreter
//! keeps its threads and frames, per process, and what a Python frame in
//! a sample record holds.

/// Most Python frames one sample carries, innermost first.
pub const PYTHON_MAX_FRAMES: usize = 64;

/// Most threads of a Python process searched for the sampled one (newest
/// first: CPython puts a new thread state at the head of the list). A
/// search costs two reads a thread searched, at a sample of a thread not
/// found yet (or once a second, of a thread without Python).
pub const PYTHON_MAX_THREADS: u32 = 256;

/// Most bytes of one frame read at once: every offset of a frame's fields
/// that the walk reads is below this.
pub const PYTHON_FRAME_READ: usize = 128;

/// A [`PythonProcess::frame_entry`] that no field of the frame holds.
pub const PYTHON_NO_OFFSET: u16 = 0xffff;

/// Bit of a Python frame's second word: the frame is the first that its
/// `_PyEval_EvalFrameDefault` call ran (its caller is native code, or
/// another call of it).
pub const PYTHON_FRAME_ENTRY: u64 = 0x8000_0000_0000_0000;

/// How a CPython version lays out its frames.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PythonLayout {
    /// 3.8 to 3.10: a chain of `PyFrameObject`s from the thread state,
    /// each run by a call of its own (every frame is an entry frame); the
    /// second word is `f_lasti`.
    FrameObjects = 0,
    /// 3.11: `_PyInterpreterFrame`s from the thread state's `cframe`, an
    /// entry frame flagged by `is_entry`; the second word is the
    /// instruction pointer's offset from the code object.
    EntryFlag = 1,
    /// 3.12 and later: `_PyInterpreterFrame`s, each call of the
    /// interpreter pushing a shim frame owned by the C stack (`owner` 3)
    /// below its first; the second word as for [`PythonLayout::EntryFlag`].
    ShimFrames = 2,
}

/// The `owner` of a shim frame ([`PythonLayout::ShimFrames`]).
pub const PYTHON_OWNED_BY_CSTACK: u8 = 3;

/// A CPython process: the `python_processes` map's value, keyed by tgid.
/// Offsets are of fields within their structure, in bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonProcess {
    /// Address of `_PyRuntime.interpreters.head` in the process: a pointer
    /// to the main interpreter's state.
    pub interpreters_head: u64,
    /// Interpreter state: its first thread state.
    pub interpreter_threads: u16,
    /// Thread state: the next thread state.
    pub thread_next: u16,
    /// Thread state: the thread's `pthread_t` (its TLS base on x86_64).
    pub thread_id: u16,
    /// Thread state: its current frame, or its `cframe` (with
    /// `cframe_frame`).
    pub thread_frame: u16,
    /// `_PyCFrame`: its current frame; [`PYTHON_NO_OFFSET`] when the
    /// thread state points at the frame itself.
    pub cframe_frame: u16,
    /// Frame: its code object.
    pub frame_code: u16,
    /// Frame: its caller's frame.
    pub frame_previous: u16,
    /// Frame: its instruction (pointer, or `f_lasti`, as `layout` says).
    pub frame_instruction: u16,
    /// Frame: the byte that says whether it is an entry frame (`is_entry`)
    /// or a shim (`owner`); [`PYTHON_NO_OFFSET`] without one.
    pub frame_entry: u16,
    /// Bytes of a frame to read: past every field above, at most
    /// [`PYTHON_FRAME_READ`].
    pub frame_read: u16,
    /// A [`PythonLayout`], raw.
    pub layout: u8,
    /// Explicit padding, 0.
    pub padding: [u8; 3],
}
