#pragma once
// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp),
// written from its documented algorithm and source: what a sequence of
// tensor allocations and releases on one stream asks of the device, as
// torch.cuda.max_memory_allocated and max_memory_reserved report it.
//
// - Sizes round up to 512 bytes. Requests up to 1 MiB come from the small
//   pool, whose segments are 2 MiB; larger ones from the large pool, whose
//   segments are 20 MiB for requests under 10 MiB and the request rounded up
//   to 2 MiB otherwise.
// - A request takes the smallest cached free block of its pool that is large
//   enough (best fit, lowest address among equals). The block is split when
//   the remainder is at least 512 bytes (small pool) or more than 1 MiB
//   (large pool, below max_split_size); otherwise the whole block is
//   allocated and counted.
// - With max_split_size set, a request below it never takes a cached block
//   of at least max_split_size, and a request of at least max_split_size
//   takes only a block less than 20 MiB larger; such blocks are never split.
// - A release returns the block to its pool and merges it with free
//   neighbours of the same segment. Segments stay reserved; only when the
//   device is full (deviceBytes) does the allocator free cached segments
//   (first blocks of at least max_split_size, then every whole free
//   segment) and retry. The planner replays with no device limit: its
//   reserved peak is what the allocator keeps when memory is to spare.
// - With expandable segments each pool has one segment that grows by
//   mapping pages (2 MiB in the small pool, 20 MiB in the large one) at its
//   end, so freed space at the end is reused by larger requests, and every
//   block is split down to 512 bytes. (Here a request of max_split_size or
//   more still takes a segment of its own.)
//
// No LibTorch here: it is arithmetic the planner runs near the fit frontier.

#include <array>
#include <compare>
#include <cstdint>
#include <limits>
#include <vector>

namespace tb {

struct CudaAllocatorSettings {
    // PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N (bytes here); unlimited by default.
    std::int64_t maxSplitSize = std::numeric_limits<std::int64_t>::max();
    bool expandableSegments = false; // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (2.1 and later)
    // What cudaMalloc can hand out in all (the card's memory less the CUDA
    // context); beyond it the allocator frees cached segments and retries.
    std::int64_t deviceBytes = std::numeric_limits<std::int64_t>::max();
};

class CudaAllocatorModel {
public:
    static constexpr std::int64_t kMinBlockSize = 512;             // every block is a multiple of this
    static constexpr std::int64_t kSmallSize = 1 << 20;            // largest request of the small pool
    static constexpr std::int64_t kSmallBuffer = 2 << 20;          // small pool segment
    static constexpr std::int64_t kLargeBuffer = 20 << 20;         // large pool segment for requests under kMinLargeAlloc
    static constexpr std::int64_t kMinLargeAlloc = 10 << 20;       // from here a segment is the request rounded up ...
    static constexpr std::int64_t kRoundLarge = 2 << 20;           // ... to this

    explicit CudaAllocatorModel(CudaAllocatorSettings settings = {});

    // The size a request is rounded to (round_size).
    static std::int64_t roundSize(std::int64_t bytes);
    // The segment cudaMalloc is asked for when no cached block fits (get_allocation_size).
    static std::int64_t segmentSize(std::int64_t roundedBytes);

    // A tensor of `bytes`: its handle, or -1 when the device is out of memory.
    int allocate(std::int64_t bytes);
    void release(int handle);
    // What the handle's block counts as allocated (its size after any split).
    std::int64_t blockBytes(int handle) const;

    std::int64_t allocated() const { return m_allocated; }
    std::int64_t reserved() const { return m_reserved; }
    std::int64_t peakAllocated() const { return m_peakAllocated; }
    std::int64_t peakReserved() const { return m_peakReserved; }
    int segments() const;       // segments cudaMalloc'ed and still held
    int deviceMallocs() const { return m_deviceMallocs; }
    int outOfMemory() const { return m_ooms; }

private:
    // A free block in its pool, ordered by size, then address. (A plain
    // struct, not a tuple: trivially copyable, so the pool's vector moves
    // its entries with memmove.)
    struct PoolKey {
        std::int64_t size, address;
        int block;
        auto operator<=>(const PoolKey&) const = default;
    };
    // A pool's free blocks in that order: in buckets of sizes (eight to a
    // power of two, each a sorted vector) with a bitmap of the ones that
    // hold any. A Llama 2 7B LoRA step recorded from the trainer keeps up to
    // about 600 free in the large pool, where one sorted vector's moves took
    // most of a replay.
    class Pool {
    public:
        void insert(const PoolKey& key);
        void erase(const PoolKey& key);
        // The first block of `size` bytes or more (the smallest, then the lowest address); null if none.
        const PoolKey* firstFrom(std::int64_t size) const;

    private:
        static constexpr int kBuckets = 64 * 8;
        static int bucketOf(std::int64_t size);
        std::array<std::vector<PoolKey>, kBuckets> m_buckets;
        std::array<std::uint64_t, kBuckets / 64> m_held{};
    };
    struct Block {
        std::int64_t address = 0, size = 0;
        int segment = -1, prev = -1, next = -1;
        bool allocated = false, small = false, live = false, pooled = false;
    };
    struct Segment {
        std::int64_t address = 0, size = 0;
        int last = -1; // the block at its end
        bool small = false, live = false;
    };
    Pool& pool(bool small) { return small ? m_smallPool : m_largePool; }
    int newBlock(const Block& b);
    int findCached(std::int64_t size, bool small);
    int newSegment(std::int64_t size, bool small);
    int growExpandable(std::int64_t size, bool small);
    bool fitsDevice(std::int64_t more);
    void releaseCachedSegments(bool oversizeOnly);
    void insertFree(int block);
    void removeFree(int block);

    CudaAllocatorSettings m_settings;
    std::vector<Block> m_blocks;
    std::vector<int> m_freeSlots;
    std::vector<Segment> m_segments;
    Pool m_smallPool, m_largePool;
    int m_expandable[2] = {-1, -1}; // the growing segment of the large [0] and small [1] pool
    std::int64_t m_nextAddress = 1LL << 32;
    std::int64_t m_allocated = 0, m_reserved = 0, m_peakAllocated = 0, m_peakReserved = 0;
    int m_deviceMallocs = 0, m_ooms = 0;
};

} // namespace tb
