// Package hostlist stores the big host lists a policy names by file
// (deny.hosts_files): category or threat lists of tens of millions of
// names, each covering itself and every name under it. Its interface is
// small — Load, (*Set).Covers, (*Set).Len — and everything behind it is
// built for that scale:
//
//   - no pointer per name: the names sit back to back in one arena, each
//     with an 8-byte hash-and-offset entry, radix-sorted under a bucket
//     directory, so the collector sees three allocations whatever the size
//     and loading writes memory only in order;
//   - on Linux the large arrays are mmap'd outside the Go heap and advised
//     onto huge pages, and the arena is faulted in on a second thread while
//     the first parses (mem_linux.go): the first touch of a gigabyte costs
//     seconds in page faults on a VM. This is the package's one use of
//     unsafe: turning a mapping into typed slices, and unmapping it once a
//     cleanup (runtime.AddCleanup) sees the Set unreachable — Covers keeps
//     its Set alive while it reads (runtime.KeepAlive);
//   - a reload whose list file is unchanged (same device, inode, size,
//     mtime and ctime, not changed within the last 2 s) shares the loaded
//     Set through a weak-pointer cache (cache.go), so a policy reload costs
//     no second load and no second copy.
//
// There is no Close: reloads share one Set between the old and the new
// policy, so it is freed when the last policy holding it is dropped,
// which the cleanup observes; an explicit Close would need a reference
// count every holder kept right.
package hostlist
