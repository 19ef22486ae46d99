//! The calling Java thread's stack for a Java event, walked from HotSpot's
//! own structures: JVMTI's GetStackTrace is most of what allocation
//! profiling costs the profiled application, and this walk takes a
//! fraction of its time (bench/RESULTS.md); compiled frames are found in
//! one hash probe.
//!
//! A thread in a JVMTI callback has left Java code through a call that
//! recorded its last Java frame in the thread's frame anchor. From there,
//! each physical frame is, by its pc:
//! - in the interpreter: the frame pointer gives the frame's `Method*`,
//!   its bytecode pointer, the caller's pc, frame pointer and stack
//!   pointer (HotSpot's x86-64 interpreter frame layout);
//! - in the code cache: the code heap's segment map gives the code blob
//!   holding the pc, whose frame size gives the caller's stack pointer,
//!   below which are its return address and saved frame pointer. A
//!   compiled method's Java frames at that return address (its inlined
//!   methods) come from [`crate::compiled_frames`], a native method's
//!   wrapper gives its `Method*`; runtime stubs have none;
//! - the call stub's return address: the entry frame of a call from the
//!   JVM into Java, whose call wrapper holds the anchor of the Java frames
//!   below it, if any.
//!
//! Anything else (a pc in no known code, a compiled method not kept, a
//! stack pointer that does not grow) gives up, and the caller asks
//! GetStackTrace instead. Reads of the thread's stack are bounded by its
//! own stack, reads of code blobs by their code heap; a `Method*` is
//! dereferenced through reads that fail instead of faulting, and its
//! method id kept per thread (a stack's bottom frames are the same event
//! after event). [`crate::event_stack`] checks the walk against
//! GetStackTrace before trusting it in a JVM.

use std::{
    cell::{Cell, RefCell},
    mem::MaybeUninit,
    ops::Range,
    ptr,
    sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    },
};

use profiler_common::{
    java_events::MAX_EVENT_FRAMES,
    jvm::{JavaFrame, BCI_NATIVE},
};

use crate::{
    compiled_frames::Table,
    frame_anchor::{self, AnchorFields},
    handler,
    jvmti_sys::JNIEnv,
    vm_structs,
};

/// Where HotSpot keeps what a walk needs, learnt once.
struct Layout {
    call_stub_return: u64,
    interpreter: Range<u64>,
    heaps: Vec<Heap>,
    /// All code heaps' reserved memory, from the lowest heap's start to
    /// the highest one's end: fixed at start-up, and holding no file.
    code_cache: Range<u64>,
    blob_frame_size: usize,
    blob_name: usize,
    nmethod_method: usize,
    /// A code blob's offset in its heap block (`sizeof(HeapBlock)`).
    block_header: usize,
    wrapper_anchor: usize,
    method: MethodFields,
}

/// One code heap: the addresses of its committed range's bounds and of its
/// segment map's start, all of which the JVM may move as the heap grows.
struct Heap {
    low: usize,
    high: usize,
    segment_map: usize,
    log2_segment: u32,
}

/// From a `Method*` to its method id and bytecodes.
struct MethodFields {
    const_method: usize,
    constants: usize,
    idnum: usize,
    /// `sizeof(ConstMethod)`: the bytecodes follow it.
    const_method_size: usize,
    pool_holder: usize,
    jmethod_ids: usize,
}

static LAYOUT: OnceLock<Option<Layout>> = OnceLock::new();

/// The slots of an interpreter frame, in words from its frame pointer
/// (HotSpot's `frame_x86.hpp`: sender sp, last sp, method, mirror, mdp,
/// cache, locals, bcp).
const SENDER_SP_SLOT: i64 = -1;
const METHOD_SLOT: i64 = -3;
const BCP_SLOT: i64 = -8;
/// The entry frame's call wrapper, in words from its frame pointer
/// (`entry_frame_call_wrapper_offset` on x86-64 Linux).
const CALL_WRAPPER_SLOT: i64 = -6;
/// Physical frames walked at most.
const MAX_PHYSICAL_FRAMES: usize = 2048;
/// Method ids kept per thread.
const METHOD_CACHE: usize = 64;

/// The name pointers of compiled methods and native wrappers, once seen.
static COMPILED_NAME: AtomicU64 = AtomicU64::new(0);
static NATIVE_WRAPPER_NAME: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Copy)]
struct CachedMethod {
    method: u64,
    id: u64,
    bytecodes: u64,
}

thread_local! {
    /// The top of this thread's stack, once asked.
    static STACK_TOP: Cell<u64> = const { Cell::new(0) };
    static METHODS: RefCell<[CachedMethod; METHOD_CACHE]> = const {
        RefCell::new([CachedMethod { method: 0, id: 0, bytecodes: 0 }; METHOD_CACHE])
    };
    /// Name pointers of stubs seen by this thread.
    static STUB_NAMES: RefCell<[u64; 8]> = const { RefCell::new([0; 8]) };
}

/// Learns where HotSpot keeps what a walk needs; without all of it, walks
/// give up and events keep GetStackTrace.
pub fn learn() {
    LAYOUT.get_or_init(|| {
        // SAFETY: the addresses are the JVM's static fields.
        unsafe { layout() }
    });
}

unsafe fn layout() -> Option<Layout> {
    let [heaps, interpreter, call_stub_return] = vm_structs::static_addresses([
        (&["CodeCache"], "_heaps"),
        (&["AbstractInterpreter"], "_code"),
        (&["StubRoutines"], "_call_stub_return_address"),
    ])?;
    // One walk of the JVM's structure table for all of them.
    let [array_len, array_data, heap_memory, heap_segmap, heap_log2, space_low, space_high, space_low_boundary, space_high_boundary, blob_frame_size, blob_name, nmethod_method, queue_buffer, queue_limit, wrapper_anchor, const_method, constants, idnum, pool_holder, jmethod_ids] =
        vm_structs::field_offsets([
            (&["GrowableArrayBase", "GenericGrowableArray"], "_len"),
            (&["GrowableArray<int>"], "_data"),
            (&["CodeHeap"], "_memory"),
            (&["CodeHeap"], "_segmap"),
            (&["CodeHeap"], "_log2_segment_size"),
            (&["VirtualSpace"], "_low"),
            (&["VirtualSpace"], "_high"),
            (&["VirtualSpace"], "_low_boundary"),
            (&["VirtualSpace"], "_high_boundary"),
            (&["CodeBlob"], "_frame_size"),
            (&["CodeBlob"], "_name"),
            (&["nmethod", "CompiledMethod"], "_method"),
            (&["StubQueue"], "_stub_buffer"),
            (&["StubQueue"], "_buffer_limit"),
            (&["JavaCallWrapper"], "_anchor"),
            (&["Method"], "_constMethod"),
            (&["ConstMethod"], "_constants"),
            (&["ConstMethod"], "_method_idnum"),
            (&["ConstantPool"], "_pool_holder"),
            (&["InstanceKlass"], "_methods_jmethod_ids"),
        ])?;
    let word = |address: usize| read::<u64>(address as u64);
    let int = |address: usize| read::<i32>(address as u64);
    // The code heaps are made at start-up and never freed; their array is
    // a GrowableArray of CodeHeap pointers.
    let array = word(heaps) as usize;
    if array == 0 {
        return None;
    }
    let count = usize::try_from(int(array + array_len)).ok()?.min(16);
    let data = word(array + array_data) as usize;
    let addresses: Vec<usize> = (0..count)
        .map(|index| word(data + index * 8) as usize)
        .collect();
    let heaps = addresses
        .iter()
        .map(|&heap| {
            Some(Heap {
                low: heap + heap_memory + space_low,
                high: heap + heap_memory + space_high,
                segment_map: heap + heap_segmap + space_low,
                log2_segment: u32::try_from(int(heap + heap_log2))
                    .ok()
                    .filter(|&log2| log2 < 16)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let reserved = |boundary: usize| {
        addresses
            .iter()
            .map(move |&heap| word(heap + heap_memory + boundary))
    };
    let code_cache = reserved(space_low_boundary).min()?..reserved(space_high_boundary).max()?;
    let queue = word(interpreter) as usize;
    if queue == 0 {
        return None;
    }
    let interpreter_start = word(queue + queue_buffer);
    let interpreter_size = u64::try_from(int(queue + queue_limit)).ok()?;
    Some(Layout {
        call_stub_return: word(call_stub_return),
        interpreter: interpreter_start..interpreter_start + interpreter_size,
        heaps,
        code_cache,
        blob_frame_size,
        blob_name,
        nmethod_method,
        block_header: vm_structs::type_size("HeapBlock")?,
        wrapper_anchor,
        method: MethodFields {
            const_method,
            constants,
            idnum,
            const_method_size: vm_structs::type_size("ConstMethod")?,
            pool_holder,
            jmethod_ids,
        },
    })
}

/// Where the JVM's compiled code lives (all its code heaps), if a walk
/// could be learnt.
pub fn code_cache() -> Option<Range<u64>> {
    learn();
    let layout = LAYOUT.get()?.as_ref()?;
    Some(layout.code_cache.clone())
}

/// The calling thread's Java stack, innermost first, into `out`; `None`
/// where the walk gives up (see the module).
///
/// # Safety
/// `env` is the calling Java thread's JNIEnv, and the thread is in a JVMTI
/// callback.
pub unsafe fn walk(
    env: *mut JNIEnv,
    compiled: &Table,
    out: &mut [MaybeUninit<JavaFrame>; MAX_EVENT_FRAMES],
) -> Option<usize> {
    let layout = LAYOUT.get()?.as_ref()?;
    let (anchor, fields) = frame_anchor::anchor_of(env)?;
    // The thread's own stack, from here to its top: its Java frames are
    // above this function's.
    let here = ptr::addr_of!(out) as u64;
    let stack = Stack {
        bounds: here..stack_top()?,
    };
    let (mut sp, mut pc, mut fp) = last_frame(anchor as u64, fields, &Stack::any())?;
    if pc == 0 {
        pc = stack.word(sp.checked_sub(8)?)?;
    }
    let mut frames = Frames { out, count: 0 };
    for _ in 0..MAX_PHYSICAL_FRAMES {
        if frames.full() {
            return Some(frames.count);
        }
        let (caller_sp, caller_pc, caller_fp) = if pc == layout.call_stub_return {
            // An entry frame: the Java frames below it, if any, hang from
            // its call wrapper's anchor.
            let wrapper = stack.word(slot(fp, CALL_WRAPPER_SLOT)?)?;
            let (below_sp, below_pc, below_fp) = last_frame(
                wrapper.checked_add(layout.wrapper_anchor as u64)?,
                fields,
                &stack,
            )?;
            if below_sp == 0 {
                return Some(frames.count);
            }
            let below_pc = match below_pc {
                0 => stack.word(below_sp.checked_sub(8)?)?,
                pc => pc,
            };
            (below_sp, below_pc, below_fp)
        } else if layout.interpreter.contains(&pc) {
            let method = stack.word(slot(fp, METHOD_SLOT)?)?;
            let bcp = stack.word(slot(fp, BCP_SLOT)?)?;
            let (id, bytecodes) = method_id(&layout.method, method)?;
            let bci = match bcp {
                0 => BCI_NATIVE,
                bcp => i32::try_from(bcp.checked_sub(bytecodes)?)
                    .ok()
                    .filter(|&bci| bci <= i32::from(u16::MAX))?,
            };
            frames.push(&[JavaFrame::new(id, bci)]);
            (
                stack.word(slot(fp, SENDER_SP_SLOT)?)?,
                stack.word(fp.checked_add(8)?)?,
                stack.word(fp)?,
            )
        } else {
            let (blob, heap_end) = layout.blob_at(pc)?;
            let field = |offset: usize| {
                let address = blob.checked_add(offset as u64)?;
                (address.checked_add(8)? <= heap_end).then_some(address)
            };
            // SAFETY (these reads): `field` keeps them inside the committed
            // part of the blob's code heap.
            let frame_size = read::<i32>(field(layout.blob_frame_size)?);
            let name = read::<u64>(field(layout.blob_name)?);
            match blob_kind(name)? {
                BlobKind::Compiled => frames.push(compiled.frames_at(pc)?),
                BlobKind::NativeWrapper => {
                    let method = read::<u64>(field(layout.nmethod_method)?);
                    let (id, _) = method_id(&layout.method, method)?;
                    frames.push(&[JavaFrame::new(id, BCI_NATIVE)]);
                }
                BlobKind::Stub => {}
            }
            let caller_sp =
                sp.checked_add(u64::try_from(frame_size).ok().filter(|&size| size > 0)? * 8)?;
            (
                caller_sp,
                stack.word(caller_sp - 8)?,
                stack.word(caller_sp - 16)?,
            )
        };
        if caller_sp <= sp {
            return None;
        }
        (sp, pc, fp) = (caller_sp, caller_pc, caller_fp);
    }
    None
}

/// The `T` at `address`.
///
/// # Safety
/// `address` is mapped and holds a `T`.
unsafe fn read<T>(address: u64) -> T {
    ptr::read_volatile(ptr::with_exposed_provenance::<T>(address as usize))
}

/// The frames written so far.
struct Frames<'a> {
    out: &'a mut [MaybeUninit<JavaFrame>; MAX_EVENT_FRAMES],
    count: usize,
}

impl Frames<'_> {
    fn full(&self) -> bool {
        self.count == MAX_EVENT_FRAMES
    }

    /// Appends `frames`, cut where `out` is full.
    fn push(&mut self, frames: &[JavaFrame]) {
        for &frame in frames {
            let Some(slot) = self.out.get_mut(self.count) else {
                return;
            };
            slot.write(frame);
            self.count += 1;
        }
    }
}

/// Reads of the walking thread's stack.
struct Stack {
    bounds: Range<u64>,
}

impl Stack {
    /// Reads of the thread's own anchor, which is in its thread object.
    fn any() -> Self {
        Self {
            bounds: 0..u64::MAX,
        }
    }

    fn word(&self, address: u64) -> Option<u64> {
        let end = address.checked_add(8)?;
        if !address.is_multiple_of(8) || address < self.bounds.start || end > self.bounds.end {
            return None;
        }
        // SAFETY: in the stack between this function's frame and the
        // stack's top (or the thread's own anchor), which is mapped.
        Some(unsafe { ptr::read_volatile(ptr::with_exposed_provenance::<u64>(address as usize)) })
    }
}

/// A frame anchor's stack pointer, pc and frame pointer.
fn last_frame(anchor: u64, fields: AnchorFields, stack: &Stack) -> Option<(u64, u64, u64)> {
    let field = |offset: usize| stack.word(anchor.checked_add(offset as u64)?);
    Some((field(fields.sp)?, field(fields.pc)?, field(fields.fp)?))
}

/// The address of the word `words` words from `fp`.
fn slot(fp: u64, words: i64) -> Option<u64> {
    fp.checked_add_signed(words * 8)
}

impl Layout {
    /// The code blob holding `pc`, and the end of its heap's committed
    /// part; `None` if no code heap holds it or its segment is free.
    fn blob_at(&self, pc: u64) -> Option<(u64, u64)> {
        // SAFETY: fields of a code heap, which lives as long as the JVM.
        let field = |address: usize| unsafe { read::<u64>(address as u64) };
        for heap in &self.heaps {
            let (low, high) = (field(heap.low), field(heap.high));
            if !(low..high).contains(&pc) {
                continue;
            }
            let map = field(heap.segment_map);
            let mut segment = (pc - low) >> heap.log2_segment;
            // The map has a byte per segment: 0 at a block's first, a
            // count of segments to go back elsewhere, 0xff if free.
            loop {
                // SAFETY: the map covers the heap's committed segments, of
                // which this is one.
                let hop = unsafe { read::<u8>(map + segment) };
                match hop {
                    0 => break,
                    0xff => return None,
                    hop => segment = segment.checked_sub(u64::from(hop))?,
                }
            }
            let blob = low + (segment << heap.log2_segment) + self.block_header as u64;
            return Some((blob, high));
        }
        None
    }
}

/// What a code blob is, by its name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlobKind {
    /// A compiled Java method (`"nmethod"`).
    Compiled,
    /// The compiled wrapper of a native method (`"native nmethod"`).
    NativeWrapper,
    /// Anything else: runtime stubs, adapters.
    Stub,
}

/// What the code blob named by `name` (its name pointer) is; `None` if
/// the name cannot be read. The JVM names every blob of a kind with the
/// same string, so each pointer is read once.
fn blob_kind(name: u64) -> Option<BlobKind> {
    if name == COMPILED_NAME.load(Ordering::Relaxed) {
        return Some(BlobKind::Compiled);
    }
    if name == NATIVE_WRAPPER_NAME.load(Ordering::Relaxed) {
        return Some(BlobKind::NativeWrapper);
    }
    let seen_stub = STUB_NAMES
        .try_with(|names| names.borrow().contains(&name))
        .unwrap_or(false);
    if seen_stub {
        return Some(BlobKind::Stub);
    }
    let kind = match &handler::read_bytes::<8>(name)? {
        b"nmethod\0" => BlobKind::Compiled,
        b"native n" if &handler::read_bytes::<7>(name + 8)? == b"method\0" => {
            BlobKind::NativeWrapper
        }
        _ => BlobKind::Stub,
    };
    match kind {
        BlobKind::Compiled => COMPILED_NAME.store(name, Ordering::Relaxed),
        BlobKind::NativeWrapper => NATIVE_WRAPPER_NAME.store(name, Ordering::Relaxed),
        BlobKind::Stub => {
            let _ = STUB_NAMES.try_with(|names| {
                let mut names = names.borrow_mut();
                names.rotate_right(1);
                names[0] = name;
            });
        }
    }
    Some(kind)
}

/// The method id of `method` (a `Method*`) and where its bytecodes start,
/// kept per thread; read through calls that fail instead of faulting.
fn method_id(fields: &MethodFields, method: u64) -> Option<(u64, u64)> {
    let index = (method as usize >> 4) % METHOD_CACHE;
    let cached = METHODS.try_with(|methods| methods.borrow()[index]).ok()?;
    if cached.method == method && method != 0 {
        return Some((cached.id, cached.bytecodes));
    }
    let at = |base: u64, offset: usize| base.checked_add(offset as u64);
    let const_method = handler::read_word(at(method, fields.const_method)?)?;
    let constants = handler::read_word(at(const_method, fields.constants)?)?;
    let idnum = u16::from_ne_bytes(handler::read_bytes::<2>(at(const_method, fields.idnum)?)?);
    let holder = handler::read_word(at(constants, fields.pool_holder)?)?;
    // The holder's method ids: their count, then one per method idnum.
    let ids = handler::read_word(at(holder, fields.jmethod_ids)?)?;
    let count = handler::read_word(ids)?;
    if ids == 0 || u64::from(idnum) >= count {
        return None;
    }
    let id = handler::read_word(ids.checked_add((u64::from(idnum) + 1) * 8)?)?;
    if id == 0 {
        return None;
    }
    let bytecodes = at(const_method, fields.const_method_size)?;
    let _ = METHODS.try_with(|methods| {
        methods.borrow_mut()[index] = CachedMethod {
            method,
            id,
            bytecodes,
        }
    });
    Some((id, bytecodes))
}

/// The top of the calling thread's stack, asked once per thread.
fn stack_top() -> Option<u64> {
    let top = STACK_TOP.try_with(Cell::get).ok()?;
    if top != 0 {
        return Some(top);
    }
    // SAFETY: attributes of the calling thread, destroyed after use.
    let top = unsafe {
        let mut attributes: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attributes) != 0 {
            return None;
        }
        let mut low: *mut libc::c_void = ptr::null_mut();
        let mut size = 0;
        let got = libc::pthread_attr_getstack(&attributes, &mut low, &mut size);
        libc::pthread_attr_destroy(&mut attributes);
        if got != 0 {
            return None;
        }
        (low as u64).checked_add(size as u64)?
    };
    let _ = STACK_TOP.try_with(|cell| cell.set(top));
    Some(top)
}
