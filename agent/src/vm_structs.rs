//! Field offsets of HotSpot's own structures, read from the table the JVM
//! publishes for its Serviceability Agent (`gHotSpotVMStructs`, with the
//! layout of its entries in the `gHotSpotVMStructEntry*` symbols beside
//! it): the offsets differ between JDK versions and builds, and that table
//! is how HotSpot itself tells them to out-of-process debuggers.

use std::ffi::{c_void, CStr};

/// The layout of one `VMStructEntry`, as the JVM describes it.
struct EntryLayout {
    stride: usize,
    type_name: usize,
    field_name: usize,
    is_static: usize,
    offset: usize,
}

/// The table's end is an entry without a type name; this bounds a walk of
/// a table that has none (a few thousand entries in every JDK).
const MAX_ENTRIES: usize = 100_000;

/// The offsets of the non-static fields asked for, as `(types, field)`
/// pairs, in the order asked, in one walk of the table; `None` if the JVM
/// publishes no table or lacks any of them. A field is listed under the
/// type that declares it, which may differ between JDKs (`_osthread` moved
/// from `Thread` to `JavaThread`): any of `types` will do.
pub fn field_offsets<const N: usize>(fields: [(&[&str], &str); N]) -> Option<[usize; N]> {
    let layout = EntryLayout {
        stride: exported_u64(c"gHotSpotVMStructEntryArrayStride")?,
        type_name: exported_u64(c"gHotSpotVMStructEntryTypeNameOffset")?,
        field_name: exported_u64(c"gHotSpotVMStructEntryFieldNameOffset")?,
        is_static: exported_u64(c"gHotSpotVMStructEntryIsStaticOffset")?,
        offset: exported_u64(c"gHotSpotVMStructEntryOffsetOffset")?,
    };
    let largest = [layout.type_name, layout.field_name, layout.offset]
        .into_iter()
        .max()?
        + 8;
    if layout.stride < largest || layout.is_static + 4 > layout.stride {
        return None;
    }
    // SAFETY: an exported pointer variable of the JVM.
    let table = unsafe { *exported(c"gHotSpotVMStructs")?.cast::<*const u8>() };
    if table.is_null() {
        return None;
    }
    let mut found = [None; N];
    for index in 0..MAX_ENTRIES {
        // SAFETY: the JVM's table, walked up to its end entry with the
        // stride and offsets it publishes.
        let entry = unsafe { table.add(index * layout.stride) };
        let type_name = unsafe { entry.add(layout.type_name).cast::<*const i8>().read() };
        if type_name.is_null() {
            break;
        }
        let field_name = unsafe { entry.add(layout.field_name).cast::<*const i8>().read() };
        let is_static = unsafe { entry.add(layout.is_static).cast::<i32>().read() } != 0;
        if field_name.is_null() || is_static {
            continue;
        }
        // SAFETY: the table's names are NUL-terminated static strings.
        let (type_name, field_name) =
            unsafe { (CStr::from_ptr(type_name), CStr::from_ptr(field_name)) };
        for (slot, (wanted_types, wanted_field)) in found.iter_mut().zip(fields) {
            if field_name.to_bytes() == wanted_field.as_bytes()
                && wanted_types
                    .iter()
                    .any(|wanted| type_name.to_bytes() == wanted.as_bytes())
            {
                let offset = unsafe { entry.add(layout.offset).cast::<u64>().read() };
                *slot = usize::try_from(offset).ok();
            }
        }
    }
    let mut offsets = [0; N];
    for (offset, found) in offsets.iter_mut().zip(found) {
        *offset = found?;
    }
    Some(offsets)
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
