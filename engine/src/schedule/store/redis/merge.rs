//! The earliest items across shards: a k-way merge that fetches each
//! shard's sorted items a page at a time, only as far as the answer needs.
//!
//! An item can be emitted once every stream that is not exhausted has a
//! buffered item (so nothing smaller can still arrive). Streams whose
//! buffer runs dry are refilled together, one concurrent round of requests.
//! With ids spread evenly over shards, a page of about `2 * limit /
//! streams` items per stream answers in one round.

use std::collections::VecDeque;
use std::future::Future;

use futures_util::future::try_join_all;

use crate::schedule::store::StoreError;

/// Smallest page asked of one stream.
const MIN_PAGE: usize = 16;

/// Where a stream's next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resume<K> {
    /// The stream.
    pub(super) stream: usize,
    /// Items fetched from it so far.
    pub(super) offset: usize,
    /// The last key fetched from it.
    pub(super) after: Option<K>,
    /// Items wanted.
    pub(super) count: usize,
}

/// The merge's answer.
#[derive(Debug)]
pub(super) struct Merged<K, T> {
    /// Up to `limit` items, smallest key first, with their stream.
    pub(super) items: Vec<(usize, K, T)>,
    /// Whether any stream has more (computed only when asked for).
    pub(super) more: bool,
}

/// The page size for `limit` items over `streams` streams.
pub(super) fn page_size(limit: usize, streams: usize) -> usize {
    (2 * limit)
        .div_ceil(streams.max(1))
        .max(MIN_PAGE)
        .min(limit.max(1))
}

/// Merge `streams` sorted streams into the `limit` smallest items.
/// `fetch` returns one page (at most `count` items, sorted) of a stream; a
/// short page means the stream is exhausted. With `want_more`, one more
/// round may be fetched at the end so that [`Merged::more`] is exact.
pub(super) async fn merge<K, T, F, Fut>(
    streams: usize,
    limit: usize,
    want_more: bool,
    fetch: F,
) -> Result<Merged<K, T>, StoreError>
where
    K: Ord + Clone,
    F: Fn(Resume<K>) -> Fut,
    Fut: Future<Output = Result<Vec<(K, T)>, StoreError>>,
{
    let page = page_size(limit, streams);
    let mut bufs: Vec<VecDeque<(K, T)>> = (0..streams).map(|_| VecDeque::new()).collect();
    let mut done = vec![limit == 0; streams];
    let mut offset = vec![0usize; streams];
    let mut last: Vec<Option<K>> = vec![None; streams];
    let mut items = Vec::new();
    loop {
        let finished = items.len() >= limit;
        if !finished || want_more {
            let dry: Vec<usize> = (0..streams)
                .filter(|&i| bufs[i].is_empty() && !done[i])
                .collect();
            if !dry.is_empty() {
                let pages = try_join_all(dry.iter().map(|&i| {
                    fetch(Resume {
                        stream: i,
                        offset: offset[i],
                        after: last[i].clone(),
                        count: page,
                    })
                }))
                .await?;
                for (i, got) in dry.into_iter().zip(pages) {
                    done[i] = got.len() < page;
                    offset[i] += got.len();
                    if let Some((k, _)) = got.last() {
                        last[i] = Some(k.clone());
                    }
                    bufs[i].extend(got);
                }
            }
        }
        if finished {
            break;
        }
        let next = (0..streams)
            .filter_map(|i| bufs[i].front().map(|(k, _)| (k, i)))
            .min()
            .map(|(_, i)| i);
        let Some(i) = next else { break };
        if let Some((k, t)) = bufs[i].pop_front() {
            items.push((i, k, t));
        }
    }
    let more = want_more && (0..streams).any(|i| !bufs[i].is_empty() || !done[i]);
    Ok(Merged { items, more })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn run(data: &[Vec<u32>], limit: usize, want_more: bool) -> (Vec<(usize, u32)>, bool, usize) {
        let rounds = Mutex::new(0usize);
        let fetch = |r: Resume<u32>| {
            *rounds.lock().unwrap() += 1;
            let page: Vec<(u32, ())> = data[r.stream]
                .iter()
                .skip(r.offset)
                .take(r.count)
                .map(|&k| (k, ()))
                .collect();
            async move { Ok(page) }
        };
        let m = futures_util::FutureExt::now_or_never(merge(data.len(), limit, want_more, fetch))
            .unwrap()
            .unwrap();
        let n = *rounds.lock().unwrap();
        (
            m.items.into_iter().map(|(i, k, ())| (i, k)).collect(),
            m.more,
            n,
        )
    }

    #[test]
    fn takes_the_smallest_across_streams_in_order() {
        let data = vec![vec![1, 4, 9], vec![2, 3], vec![], vec![5, 6, 7, 8]];
        let (items, more, _) = run(&data, 5, true);
        assert_eq!(items, vec![(0, 1), (1, 2), (1, 3), (0, 4), (3, 5)]);
        assert!(more);
        let (items, more, _) = run(&data, 100, true);
        assert_eq!(items.len(), 9);
        assert!(!more);
        assert_eq!(run(&data, 0, true).0, vec![]);
    }

    #[test]
    fn a_stream_much_larger_than_a_page_is_read_page_by_page() {
        let big: Vec<u32> = (0..100).collect();
        let data = vec![big, vec![1000]];
        let (items, more, fetches) = run(&data, 60, true);
        assert_eq!(
            items.iter().map(|&(_, k)| k).collect::<Vec<_>>(),
            (0..60).collect::<Vec<_>>()
        );
        assert!(more);
        assert!(fetches >= 2);
    }

    #[test]
    fn exactly_limit_items_still_tells_whether_more_exist() {
        let data = vec![vec![1, 2], vec![3]];
        assert!(!run(&data, 3, true).1);
        assert!(run(&data, 2, true).1);
    }

    #[test]
    fn page_sizes_stay_within_bounds() {
        assert_eq!(page_size(2, 32), 2);
        assert_eq!(page_size(1000, 16), 125);
        assert_eq!(page_size(10, 16), 10);
        assert_eq!(page_size(100, 16), 16);
    }
}
