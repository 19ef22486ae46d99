//! A table's page index: for each page of `pc` (a size chosen per file,
//! [`MIN_UNWIND_PAGE_SHIFT`] to [`MAX_UNWIND_PAGE_SHIFT`]), which rows
//! begin in it, so that the BPF unwinder binary-searches a page's few rows
//! instead of a whole file's (the OpenTelemetry eBPF profiler's
//! stack-delta pages do the same).

use profiler_common::unwind::{
    UnwindPage, UnwindRow, MAX_UNWIND_PAGE_SHIFT, MIN_UNWIND_PAGE_SHIFT, ROWS_PER_PAGE,
};

/// A file's page index.
#[derive(Debug, Default)]
pub struct PageIndex {
    /// A page is `1 << shift` bytes of `pc`.
    pub shift: u32,
    /// From `pc` 0 to the last row's page.
    pub pages: Vec<UnwindPage>,
}

/// The index of `rows` (sorted by `pc`), with the smallest pages that are
/// at most a quarter as many as the rows; `None` for rows too few for the
/// span they cover even with the largest pages (a forged file: searched
/// whole, which takes no more steps than its few rows need).
pub fn page_index(rows: &[UnwindRow]) -> Option<PageIndex> {
    let last = rows.last()?;
    let most = rows.len() / ROWS_PER_PAGE as usize;
    let (shift, count) = (MIN_UNWIND_PAGE_SHIFT..=MAX_UNWIND_PAGE_SHIFT)
        .map(|shift| (shift, (last.pc >> shift) as usize + 1))
        .find(|&(_, count)| count <= most)?;
    let mut pages = Vec::with_capacity(count);
    let mut next = 0;
    for page in 0..count as u64 {
        let first = next;
        let page_end = (page + 1) << shift;
        while next < rows.len() && u64::from(rows[next].pc) < page_end {
            next += 1;
        }
        pages.push(UnwindPage {
            first: first as u32,
            end: next as u32,
        });
    }
    Some(PageIndex { shift, pages })
}

/// The row covering `relative` as the BPF unwinder finds it through the
/// index: the last row at or before it among those up to its page's end.
#[cfg(test)]
pub fn find_row(rows: &[UnwindRow], index: &PageIndex, relative: u32) -> Option<usize> {
    let page = (relative >> index.shift) as usize;
    let (first, end) = match index.pages.get(page) {
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
        let page = 1 << MIN_UNWIND_PAGE_SHIFT;
        let mut pcs = vec![16, 32, page + 1, 3 * page, 3 * page + 5];
        // Enough rows past the pages looked at for the smallest pages.
        pcs.extend((0..11).map(|i| 3 * page + 6 + i));
        let index = page_index(&rows(&pcs)).unwrap();
        assert_eq!(index.shift, MIN_UNWIND_PAGE_SHIFT);
        let spans: Vec<(u32, u32)> = index.pages.iter().map(|p| (p.first, p.end)).collect();
        assert_eq!(spans, [(0, 2), (2, 3), (3, 3), (3, 16)]);
    }

    #[test]
    fn pages_grow_until_they_are_at_most_a_quarter_of_the_rows() {
        // 64 rows over 1 MiB: 16 pages at most, of 64 KiB.
        let pcs: Vec<u32> = (0..64).map(|i| i << 14).collect();
        let index = page_index(&rows(&pcs)).unwrap();
        assert_eq!(index.shift, 16);
        assert_eq!(index.pages.len(), 16);
        // 64 rows in 4 KiB: 16 pages of 256 bytes.
        let pcs: Vec<u32> = (0..64).map(|i| i << 6).collect();
        let index = page_index(&rows(&pcs)).unwrap();
        assert_eq!(index.shift, MIN_UNWIND_PAGE_SHIFT);
        assert_eq!(index.pages.len(), 16);
    }

    #[test]
    fn a_lookup_through_the_index_finds_what_a_whole_search_finds() {
        let page = 1 << 10;
        let mut pcs = vec![
            100,
            200,
            page - 1,
            page,
            2 * page + 7,
            5 * page,
            5 * page + 1,
        ];
        pcs.extend((1..=21).map(|i| 5 * page + 1 + i * 40));
        let rows = rows(&pcs);
        let index = page_index(&rows).unwrap();
        assert!(index.pages.len() > 4, "{index:?}");
        for relative in (0..7 * page).step_by(3).chain([page - 1, page, 5 * page]) {
            let whole = rows
                .partition_point(|row| row.pc <= relative)
                .checked_sub(1);
            assert_eq!(find_row(&rows, &index, relative), whole, "at {relative:#x}");
        }
    }

    #[test]
    fn rows_spread_too_far_get_no_index() {
        assert!(page_index(&rows(&[0, 1, 2, 3, u32::MAX])).is_none());
        assert!(page_index(&[]).is_none());
    }
}
