//! A table's page index: for each page of `pc` (`1 <<`
//! [`UNWIND_PAGE_SHIFT`] bytes), which rows begin in it, so that the BPF
//! unwinder binary-searches a page's few rows instead of a whole file's
//! (the OpenTelemetry eBPF profiler's stack-delta pages do the same).

use profiler_common::unwind::{UnwindPage, UnwindRow, UNWIND_PAGE_SHIFT};

/// Most pages one file's index may have (256 MiB of code): a table whose
/// rows spread further (a forged file) is searched without an index, not
/// given a map's worth of pages.
pub const MAX_FILE_PAGES: usize = 1 << 16;

/// The index of `rows` (sorted by `pc`): one page from `pc` 0 to the last
/// row's page; `None` for no rows, or rows spread over more than
/// [`MAX_FILE_PAGES`].
pub fn page_index(rows: &[UnwindRow]) -> Option<Vec<UnwindPage>> {
    let last = rows.last()?;
    let count = (last.pc >> UNWIND_PAGE_SHIFT) as usize + 1;
    if count > MAX_FILE_PAGES {
        return None;
    }
    let mut pages = Vec::with_capacity(count);
    let mut next = 0;
    for page in 0..count as u64 {
        let first = next;
        let page_end = (page + 1) << UNWIND_PAGE_SHIFT;
        while next < rows.len() && u64::from(rows[next].pc) < page_end {
            next += 1;
        }
        pages.push(UnwindPage {
            first: first as u32,
            end: next as u32,
        });
    }
    Some(pages)
}

/// The row covering `relative` as the BPF unwinder finds it through the
/// index: the last row at or before it among those up to its page's end.
#[cfg(test)]
pub fn find_row(rows: &[UnwindRow], pages: &[UnwindPage], relative: u32) -> Option<usize> {
    let page = (relative >> UNWIND_PAGE_SHIFT) as usize;
    let (first, end) = match pages.get(page) {
        Some(page) => (page.first as usize, page.end as usize),
        None => (rows.len(), rows.len()),
    };
    let before = first + rows[first..end].partition_point(|row| row.pc <= relative);
    before.checked_sub(1)
}

#[cfg(test)]
mod tests {
    use profiler_common::unwind::{RbpRule, RowKind};

    use super::*;

    fn rows(pcs: &[u32]) -> Vec<UnwindRow> {
        pcs.iter()
            .map(|&pc| UnwindRow {
                pc,
                cfa_offset: 8,
                rbp_offset: 0,
                kind: RowKind::CfaRsp,
                rbp: RbpRule::Unchanged,
            })
            .collect()
    }

    #[test]
    fn each_page_lists_the_rows_that_begin_in_it() {
        let page = 1 << UNWIND_PAGE_SHIFT;
        let rows = rows(&[16, 32, page + 1, 3 * page, 3 * page + 5]);
        let pages = page_index(&rows).unwrap();
        let spans: Vec<(u32, u32)> = pages.iter().map(|p| (p.first, p.end)).collect();
        assert_eq!(spans, [(0, 2), (2, 3), (3, 3), (3, 5)]);
    }

    #[test]
    fn a_lookup_through_the_index_finds_what_a_whole_search_finds() {
        let page = 1 << UNWIND_PAGE_SHIFT;
        let rows = rows(&[
            100,
            200,
            page - 1,
            page,
            2 * page + 7,
            5 * page,
            5 * page + 1,
        ]);
        let pages = page_index(&rows).unwrap();
        for relative in (0..7 * page).step_by(3).chain([page - 1, page, 5 * page]) {
            let whole = rows
                .partition_point(|row| row.pc <= relative)
                .checked_sub(1);
            assert_eq!(find_row(&rows, &pages, relative), whole, "at {relative:#x}");
        }
    }

    #[test]
    fn rows_spread_too_far_get_no_index() {
        assert!(page_index(&rows(&[0, u32::MAX])).is_none());
        assert!(page_index(&[]).is_none());
    }
}
