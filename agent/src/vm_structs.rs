//! Field offsets, static addresses and type sizes of HotSpot's own
//! structures, read from the tables the JVM publishes for its
//! Serviceability Agent (`gHotSpotVMStructs` and `gHotSpotVMTypes`, with
//! the layout of their entries in the `gHotSpotVMStructEntry*` and
//! `gHotSpotVMTypeEntry*` symbols beside them): the offsets differ between
//! JDK versions and builds, and these tables are how HotSpot itself tells
//! them to out-of-process debuggers.

use std::ffi::{c_void, CStr};

/// The layout of one `VMStructEntry`, as the JVM describes it.
struct EntryLayout {
    stride: usize,
    type_name: usize,
    field_name: usize,
    is_static: usize,
    offset: usize,
    address: usize,
}

/// A table's end is an entry without a type name; this bounds a walk of a
/// table that has none (a few thousand entries in every JDK).
const MAX_ENTRIES: usize = 100_000;

/// A field asked for: the types that may declare it (which may differ
/// between JDKs: `_osthread` moved from `Thread` to `JavaThread`; any
/// will do) and its name.
pub type Field<'a> = (&'a [&'a str], &'a str);

/// The offsets of the non-static fields asked for, in the order asked, in
/// one walk of the table; `None` if the JVM publishes no table or lacks any
/// of them.
pub fn field_offsets<const N: usize>(fields: [Field; N]) -> Option<[usize; N]> {
    let mut found = [None; N];
    entries(|type_name, field_name, is_static, offset, _| {
        if !is_static {
            fill(&mut found, &fields, type_name, field_name, offset);
        }
    })?;
    all(found)
}

/// The addresses of the static fields asked for, as [`field_offsets`].
pub fn static_addresses<const N: usize>(fields: [Field; N]) -> Option<[usize; N]> {
    let mut found = [None; N];
    entries(|type_name, field_name, is_static, _, address| {
        if is_static && address != 0 {
            fill(&mut found, &fields, type_name, field_name, address);
        }
    })?;
    all(found)
}

/// The size of HotSpot's type `name` (`sizeof`), from its type table.
pub fn type_size(name: &str) -> Option<usize> {
    let stride = exported_u64(c"gHotSpotVMTypeEntryArrayStride")?;
    let type_name = exported_u64(c"gHotSpotVMTypeEntryTypeNameOffset")?;
    let size_offset = exported_u64(c"gHotSpotVMTypeEntrySizeOffset")?;
    if stride < type_name.max(size_offset) + 8 {
        return None;
    }
    let mut size = None;
    walk_table(
        c"gHotSpotVMTypes",
        stride,
        type_name,
        |entry, entry_name| {
            if entry_name == name.as_bytes() {
                // SAFETY: the entry's size field, inside its stride.
                let value = unsafe { entry.add(size_offset).cast::<u64>().read() };
                size = usize::try_from(value).ok();
            }
            size.is_none()
        },
    )?;
    size
}

fn fill<const N: usize>(
    found: &mut [Option<usize>; N],
    fields: &[Field; N],
    type_name: &[u8],
    field_name: &[u8],
    value: usize,
) {
    for (slot, (wanted_types, wanted_field)) in found.iter_mut().zip(fields) {
        if field_name == wanted_field.as_bytes()
            && wanted_types
                .iter()
                .any(|wanted| type_name == wanted.as_bytes())
        {
            *slot = Some(value);
        }
    }
}

fn all<const N: usize>(found: [Option<usize>; N]) -> Option<[usize; N]> {
    let mut values = [0; N];
    for (value, found) in values.iter_mut().zip(found) {
        *value = found?;
    }
    Some(values)
}

/// Calls `visit(type, field, is_static, offset, address)` for each entry
/// of the structure table; `None` if the JVM publishes none.
fn entries(mut visit: impl FnMut(&[u8], &[u8], bool, usize, usize)) -> Option<()> {
    let layout = EntryLayout {
        stride: exported_u64(c"gHotSpotVMStructEntryArrayStride")?,
        type_name: exported_u64(c"gHotSpotVMStructEntryTypeNameOffset")?,
        field_name: exported_u64(c"gHotSpotVMStructEntryFieldNameOffset")?,
        is_static: exported_u64(c"gHotSpotVMStructEntryIsStaticOffset")?,
        offset: exported_u64(c"gHotSpotVMStructEntryOffsetOffset")?,
        address: exported_u64(c"gHotSpotVMStructEntryAddressOffset")?,
    };
    let largest = [
        layout.type_name,
        layout.field_name,
        layout.offset,
        layout.address,
    ]
    .into_iter()
    .max()?
        + 8;
    if layout.stride < largest || layout.is_static + 4 > layout.stride {
        return None;
    }
    walk_table(
        c"gHotSpotVMStructs",
        layout.stride,
        layout.type_name,
        |entry, type_name| {
            // SAFETY: the entry's fields, inside its stride; its names are
            // NUL-terminated static strings.
            unsafe {
                let field_name = entry.add(layout.field_name).cast::<*const i8>().read();
                if !field_name.is_null() {
                    visit(
                        type_name,
                        CStr::from_ptr(field_name).to_bytes(),
                        entry.add(layout.is_static).cast::<i32>().read() != 0,
                        usize::try_from(entry.add(layout.offset).cast::<u64>().read())
                            .unwrap_or(usize::MAX),
                        usize::try_from(entry.add(layout.address).cast::<u64>().read())
                            .unwrap_or(0),
                    );
                }
            }
            true
        },
    )
}

/// Calls `visit(entry, name)` for each entry of the table the exported
/// pointer `symbol` points to, entries `stride` bytes apart with a name
/// pointer at `name`, up to the end entry (a null name) or until `visit`
/// says false; `None` if the JVM exports no such table.
fn walk_table(
    symbol: &CStr,
    stride: usize,
    name: usize,
    mut visit: impl FnMut(*const u8, &[u8]) -> bool,
) -> Option<()> {
    // SAFETY: an exported pointer variable of the JVM.
    let table = unsafe { *exported(symbol)?.cast::<*const u8>() };
    if table.is_null() {
        return None;
    }
    for index in 0..MAX_ENTRIES {
        // SAFETY: the JVM's table, walked up to its end entry with the
        // stride and offsets it publishes; its names are NUL-terminated
        // static strings.
        let (entry, entry_name) = unsafe {
            let entry = table.add(index * stride);
            (entry, entry.add(name).cast::<*const i8>().read())
        };
        if entry_name.is_null() {
            break;
        }
        // SAFETY: as above.
        if !visit(entry, unsafe { CStr::from_ptr(entry_name) }.to_bytes()) {
            break;
        }
    }
    Some(())
}

fn exported(name: &CStr) -> Option<*const c_void> {
    // SAFETY: dlsym with a NUL-terminated name.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!symbol.is_null()).then_some(symbol.cast_const())
}

fn exported_u64(name: &CStr) -> Option<usize> {
    // SAFETY: the JVM exports these as uint64_t variables.
    let value = unsafe { *exported(name)?.cast::<u64>() };
    usize::try_from(value).ok()
}
