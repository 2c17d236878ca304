#include "memory/CudaAllocatorModel.h"

#include <algorithm>
#include <cassert>

namespace tb {

CudaAllocatorModel::CudaAllocatorModel(CudaAllocatorSettings settings) : m_settings(settings) {}

std::int64_t CudaAllocatorModel::roundSize(std::int64_t bytes)
{
    if (bytes < kMinBlockSize) return kMinBlockSize;
    return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

std::int64_t CudaAllocatorModel::segmentSize(std::int64_t rounded)
{
    if (rounded <= kSmallSize) return kSmallBuffer;
    if (rounded < kMinLargeAlloc) return kLargeBuffer;
    return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

int CudaAllocatorModel::newBlock(const Block& b)
{
    if (!m_freeSlots.empty()) {
        const int id = m_freeSlots.back();
        m_freeSlots.pop_back();
        m_blocks[id] = b;
        m_blocks[id].live = true;
        return id;
    }
    m_blocks.push_back(b);
    m_blocks.back().live = true;
    return static_cast<int>(m_blocks.size()) - 1;
}

int CudaAllocatorModel::Pool::bucketOf(std::int64_t size)
{
    // The power of two at or below the size, and the three bits after its
    // top one: buckets rise with the size (every size is 512 or more).
    const int top = 63 - __builtin_clzll(static_cast<unsigned long long>(size));
    return top * 8 + static_cast<int>((size >> (top - 3)) & 7);
}

void CudaAllocatorModel::Pool::insert(const PoolKey& key)
{
    const int b = bucketOf(key.size);
    auto& v = m_buckets[static_cast<std::size_t>(b)];
    v.insert(std::lower_bound(v.begin(), v.end(), key), key);
    m_held[static_cast<std::size_t>(b / 64)] |= 1ULL << (b % 64);
}

void CudaAllocatorModel::Pool::erase(const PoolKey& key)
{
    const int b = bucketOf(key.size);
    auto& v = m_buckets[static_cast<std::size_t>(b)];
    const auto it = std::lower_bound(v.begin(), v.end(), key);
    assert(it != v.end() && *it == key); // a pooled block is in its pool under its size and address
    if (it == v.end() || !(*it == key)) return;
    v.erase(it);
    if (v.empty()) m_held[static_cast<std::size_t>(b / 64)] &= ~(1ULL << (b % 64));
}

const CudaAllocatorModel::PoolKey* CudaAllocatorModel::Pool::firstFrom(std::int64_t size) const
{
    int b = bucketOf(size);
    const auto& v = m_buckets[static_cast<std::size_t>(b)];
    const auto it = std::lower_bound(v.begin(), v.end(), PoolKey{size, std::numeric_limits<std::int64_t>::min(), -1});
    if (it != v.end()) return &*it;
    // The next bucket that holds any: its first block.
    for (++b; b < kBuckets; b = (b / 64 + 1) * 64) {
        const auto word = m_held[static_cast<std::size_t>(b / 64)] >> (b % 64);
        if (word != 0) return &m_buckets[static_cast<std::size_t>(b + __builtin_ctzll(word))].front();
    }
    return nullptr;
}

void CudaAllocatorModel::insertFree(int id)
{
    auto& b = m_blocks[id];
    assert(!b.pooled);
    pool(b.small).insert(PoolKey{b.size, b.address, id});
    b.pooled = true;
}

void CudaAllocatorModel::removeFree(int id)
{
    auto& b = m_blocks[id];
    if (!b.pooled) return;
    pool(b.small).erase(PoolKey{b.size, b.address, id});
    b.pooled = false;
}

// get_free_block: the smallest cached block of the pool that holds the
// request, and the max_split_size rules that keep large blocks whole.
int CudaAllocatorModel::findCached(std::int64_t size, bool small)
{
    const auto* it = pool(small).firstFrom(size);
    if (!it) return -1;
    const auto blockSize = it->size;
    const auto maxSplit = m_settings.maxSplitSize;
    if (size < maxSplit && blockSize >= maxSplit) return -1;
    if (size >= maxSplit && blockSize >= size + kLargeBuffer) return -1;
    return it->block;
}

bool CudaAllocatorModel::fitsDevice(std::int64_t more)
{
    return more <= m_settings.deviceBytes - m_reserved;
}

int CudaAllocatorModel::newSegment(std::int64_t size, bool small)
{
    if (!fitsDevice(size)) {
        // cudaMalloc failed: free cached blocks of max_split_size and more,
        // then every cached segment that is whole and free, and retry.
        if (m_settings.maxSplitSize != std::numeric_limits<std::int64_t>::max()) releaseCachedSegments(true);
        if (!fitsDevice(size)) releaseCachedSegments(false);
        if (!fitsDevice(size)) return -1;
    }
    Segment s;
    s.address = m_nextAddress;
    s.size = size;
    s.small = small;
    s.live = true;
    m_nextAddress += size + kRoundLarge; // segments never touch: no merging across them
    m_segments.push_back(s);
    m_reserved += size;
    m_peakReserved = std::max(m_peakReserved, m_reserved);
    ++m_deviceMallocs;
    Block b;
    b.address = s.address;
    b.size = size;
    b.segment = static_cast<int>(m_segments.size()) - 1;
    b.small = small;
    const int id = newBlock(b);
    m_segments.back().last = id;
    return id;
}

// An expandable segment maps pages at its end: the free block there (if
// any) grows, and is what the request takes.
int CudaAllocatorModel::growExpandable(std::int64_t size, bool small)
{
    const std::int64_t page = small ? kSmallBuffer : kLargeBuffer;
    int& seg = m_expandable[small ? 1 : 0];
    if (seg < 0) {
        Segment s;
        s.address = m_nextAddress;
        s.small = small;
        s.live = true;
        m_nextAddress += 1LL << 44; // the segment's reserved address range
        m_segments.push_back(s);
        seg = static_cast<int>(m_segments.size()) - 1;
    }
    auto& s = m_segments[seg];
    // The last block of the segment, when it is free, grows.
    const int tail = s.last;
    const std::int64_t freeTail = tail >= 0 && !m_blocks[tail].allocated ? m_blocks[tail].size : 0;
    if (freeTail >= size) { // large enough already (best fit passed it over under max_split_size's rules)
        removeFree(tail);
        return tail;
    }
    const std::int64_t more = (size - freeTail + page - 1) / page * page;
    if (!fitsDevice(more)) return -1;
    s.size += more;
    m_reserved += more;
    m_peakReserved = std::max(m_peakReserved, m_reserved);
    ++m_deviceMallocs;
    if (freeTail > 0) {
        removeFree(tail);
        m_blocks[tail].size += more;
        return tail;
    }
    Block b;
    b.address = s.address + s.size - more;
    b.size = more;
    b.segment = seg;
    b.small = small;
    b.prev = tail;
    const int id = newBlock(b);
    if (tail >= 0) m_blocks[tail].next = id;
    m_segments[seg].last = id;
    return id;
}

void CudaAllocatorModel::releaseCachedSegments(bool oversizeOnly)
{
    for (int si = 0; si < static_cast<int>(m_segments.size()); ++si) {
        auto& s = m_segments[si];
        if (!s.live || si == m_expandable[0] || si == m_expandable[1]) continue;
        if (oversizeOnly && s.size < m_settings.maxSplitSize) continue;
        // Whole and free: one block spanning the segment, not allocated.
        int only = -1;
        for (int id = 0; id < static_cast<int>(m_blocks.size()); ++id) {
            const auto& b = m_blocks[id];
            if (b.live && b.segment == si) {
                if (only >= 0 || b.allocated || b.size != s.size) { only = -2; break; }
                only = id;
            }
        }
        if (only < 0) continue;
        removeFree(only);
        m_blocks[only].live = false;
        m_freeSlots.push_back(only);
        s.live = false;
        m_reserved -= s.size;
    }
}

int CudaAllocatorModel::allocate(std::int64_t bytes)
{
    const std::int64_t size = roundSize(bytes);
    const bool small = size <= kSmallSize;
    int id = findCached(size, small);
    if (id >= 0) {
        removeFree(id);
    } else {
        const bool oversize = size >= m_settings.maxSplitSize;
        id = m_settings.expandableSegments && !oversize ? growExpandable(size, small)
                                                         : newSegment(segmentSize(size), small);
        if (id < 0) {
            ++m_ooms;
            return -1;
        }
    }
    auto& b = m_blocks[id];
    const std::int64_t remaining = b.size - size;
    // should_split: with expandable segments every pool splits down to 512 bytes.
    const bool split = small || m_settings.expandableSegments
                           ? remaining >= kMinBlockSize
                           : size < m_settings.maxSplitSize && remaining > kSmallSize;
    if (split) {
        Block rest;
        rest.address = b.address + size;
        rest.size = remaining;
        rest.segment = b.segment;
        rest.small = b.small;
        rest.prev = id;
        rest.next = b.next;
        b.size = size;
        const int restId = newBlock(rest); // may reallocate m_blocks: b is not used after this
        if (m_blocks[restId].next >= 0) m_blocks[m_blocks[restId].next].prev = restId;
        else m_segments[m_blocks[restId].segment].last = restId;
        m_blocks[id].next = restId;
        insertFree(restId);
    }
    m_blocks[id].allocated = true;
    m_allocated += m_blocks[id].size;
    m_peakAllocated = std::max(m_peakAllocated, m_allocated);
    return id;
}

void CudaAllocatorModel::release(int id)
{
    if (id < 0 || id >= static_cast<int>(m_blocks.size()) || !m_blocks[id].live || !m_blocks[id].allocated) return;
    m_blocks[id].allocated = false;
    m_allocated -= m_blocks[id].size;
    // try_merge_blocks: with the free neighbours of the same segment.
    for (const int neighbour : {m_blocks[id].prev, m_blocks[id].next}) {
        if (neighbour < 0 || m_blocks[neighbour].allocated) continue;
        removeFree(neighbour);
        auto& b = m_blocks[id];
        auto& n = m_blocks[neighbour];
        if (n.address < b.address) {
            b.address = n.address;
            b.prev = n.prev;
            if (b.prev >= 0) m_blocks[b.prev].next = id;
        } else {
            b.next = n.next;
            if (b.next >= 0) m_blocks[b.next].prev = id;
            else m_segments[b.segment].last = id;
        }
        b.size += n.size;
        n.live = false;
        m_freeSlots.push_back(neighbour);
    }
    insertFree(id);
}

std::int64_t CudaAllocatorModel::blockBytes(int id) const
{
    if (id < 0 || id >= static_cast<int>(m_blocks.size()) || !m_blocks[id].live) return 0;
    return m_blocks[id].size;
}

int CudaAllocatorModel::segments() const
{
    return static_cast<int>(
        std::count_if(m_segments.begin(), m_segments.end(), [](const Segment& s) { return s.live && s.size > 0; }));
}

} // namespace tb
