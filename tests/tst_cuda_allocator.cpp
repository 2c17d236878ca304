// The model of PyTorch's CUDA caching allocator against examples worked by
// hand from c10/cuda/CUDACachingAllocator.cpp: rounding, the two pools and
// their segment sizes, best fit, when a block is split, merging on release,
// max_split_size_mb, expandable segments, and freeing cached segments when
// the device is full.
#include <QtTest>

#include "memory/CudaAllocatorModel.h"

using namespace tb;

namespace {
constexpr std::int64_t KiB = 1024, MiB = 1024 * 1024;
}

class TestCudaAllocator : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void roundingAndSegmentSizes()
    {
        QCOMPARE(CudaAllocatorModel::roundSize(1), 512);
        QCOMPARE(CudaAllocatorModel::roundSize(512), 512);
        QCOMPARE(CudaAllocatorModel::roundSize(513), 1024);
        QCOMPARE(CudaAllocatorModel::segmentSize(512), 2 * MiB);          // small pool
        QCOMPARE(CudaAllocatorModel::segmentSize(1 * MiB), 2 * MiB);      // still small
        QCOMPARE(CudaAllocatorModel::segmentSize(1 * MiB + 512), 20 * MiB); // large, under 10 MiB
        QCOMPARE(CudaAllocatorModel::segmentSize(10 * MiB - 512), 20 * MiB);
        QCOMPARE(CudaAllocatorModel::segmentSize(10 * MiB), 10 * MiB);    // from 10 MiB: rounded to 2 MiB
        QCOMPARE(CudaAllocatorModel::segmentSize(11 * MiB), 12 * MiB);
    }

    void smallRequestsShareASegment()
    {
        CudaAllocatorModel m;
        const int a = m.allocate(100);     // 512 bytes of a new 2 MiB segment
        const int b = m.allocate(1000);    // 1024 bytes, split off the remainder
        QCOMPARE(m.blockBytes(a), 512);
        QCOMPARE(m.blockBytes(b), 1024);
        QCOMPARE(m.allocated(), 1536);
        QCOMPARE(m.reserved(), 2 * MiB);
        QCOMPARE(m.segments(), 1);
        // 2 MiB - 1536 bytes remain: a 1 MiB request fits in them.
        const int c = m.allocate(1 * MiB);
        QCOMPARE(m.blockBytes(c), 1 * MiB);
        QCOMPARE(m.reserved(), 2 * MiB);
        // The rest (1 MiB - 1536) is too small for another 1 MiB: a second segment.
        (void)m.allocate(1 * MiB);
        QCOMPARE(m.reserved(), 4 * MiB);
        QCOMPARE(m.segments(), 2);
    }

    void largeRemainderUnderOneMiBIsNotSplit()
    {
        // 9 MiB from a fresh 20 MiB segment: 11 MiB remain, more than 1 MiB: split.
        CudaAllocatorModel m;
        const int a = m.allocate(9 * MiB);
        QCOMPARE(m.blockBytes(a), 9 * MiB);
        QCOMPARE(m.reserved(), 20 * MiB);
        // 10.5 MiB of the 11 MiB left: the 0.5 MiB remainder is not split
        // off, so the whole 11 MiB block is allocated and counted.
        const int b = m.allocate(10 * MiB + 512 * KiB);
        QCOMPARE(m.blockBytes(b), 11 * MiB);
        QCOMPARE(m.allocated(), 20 * MiB);
        QCOMPARE(m.reserved(), 20 * MiB);
        QCOMPARE(m.peakAllocated(), 20 * MiB);
        // Exactly 1 MiB left over is not split either (the rule is "more than 1 MiB"):
        // 19 MiB rounds its segment up to 20 MiB and takes all of it.
        CudaAllocatorModel n;
        QCOMPARE(n.blockBytes(n.allocate(19 * MiB)), 20 * MiB);
        // 18.5 MiB leaves 1.5 MiB: split off, and a 1.5 MiB request takes it exactly.
        CudaAllocatorModel o;
        (void)o.allocate(18 * MiB + 512 * KiB);
        const int c = o.allocate(512 * KiB + 1); // the small pool: its own 2 MiB segment
        QCOMPARE(o.blockBytes(c), 512 * KiB + 512);
        QCOMPARE(o.reserved(), 22 * MiB);
        const int d = o.allocate(1 * MiB + 512 * KiB);
        QCOMPARE(o.blockBytes(d), 1 * MiB + 512 * KiB);
        QCOMPARE(o.reserved(), 22 * MiB);
    }

    void bestFitAndMergeOnRelease()
    {
        CudaAllocatorModel m;
        // Three 4 MiB blocks of one 20 MiB segment, 8 MiB left at its end.
        const int a = m.allocate(4 * MiB), b = m.allocate(4 * MiB), c = m.allocate(4 * MiB);
        QCOMPARE(m.reserved(), 20 * MiB);
        (void)c;
        m.release(a); // free: [a 4][b used][c used][8 free]
        // A 3 MiB request takes the 4 MiB hole (best fit), split into 3 + 1 MiB:
        // the 1 MiB remainder is not more than 1 MiB, so the whole 4 MiB is used.
        const int d = m.allocate(3 * MiB);
        QCOMPARE(m.blockBytes(d), 4 * MiB);
        m.release(d);
        m.release(b); // a and b merge into one free 8 MiB block
        // 7 MiB: two free 8 MiB blocks; the lower address wins, split 7 + 1: not split.
        const int e = m.allocate(7 * MiB);
        QCOMPARE(m.blockBytes(e), 8 * MiB);
        QCOMPARE(m.reserved(), 20 * MiB);
        // 8 MiB more still fits (the end of the segment); then a new segment.
        (void)m.allocate(8 * MiB);
        QCOMPARE(m.reserved(), 20 * MiB);
        (void)m.allocate(2 * MiB);
        QCOMPARE(m.reserved(), 40 * MiB);
        QCOMPARE(m.deviceMallocs(), 2);
    }

    void releasedSegmentsStayReserved()
    {
        CudaAllocatorModel m;
        const int a = m.allocate(100 * MiB);
        QCOMPARE(m.reserved(), 100 * MiB);
        m.release(a);
        QCOMPARE(m.allocated(), 0);
        QCOMPARE(m.reserved(), 100 * MiB);
        // A 60 MiB request is served from the cached 100 MiB block (split, 40 MiB left).
        const int b = m.allocate(60 * MiB);
        QCOMPARE(m.blockBytes(b), 60 * MiB);
        QCOMPARE(m.reserved(), 100 * MiB);
        // 50 MiB does not fit the 40 MiB left: a new 50 MiB segment.
        (void)m.allocate(50 * MiB);
        QCOMPARE(m.reserved(), 150 * MiB);
        QCOMPARE(m.peakReserved(), 150 * MiB);
        QCOMPARE(m.peakAllocated(), 110 * MiB);
    }

    void maxSplitSizeKeepsLargeBlocksWhole()
    {
        CudaAllocatorSettings s;
        s.maxSplitSize = 64 * MiB;
        CudaAllocatorModel m(s);
        const int a = m.allocate(100 * MiB);
        m.release(a);
        // Below max_split_size a request never takes the oversize cached block.
        (void)m.allocate(30 * MiB);
        QCOMPARE(m.reserved(), 130 * MiB);
        // At or above it, only a block less than 20 MiB larger: 90 MiB takes
        // the 100 MiB block (100 < 90 + 20), whole: an oversize block is never split.
        const int c = m.allocate(90 * MiB);
        QCOMPARE(m.blockBytes(c), 100 * MiB);
        QCOMPARE(m.reserved(), 130 * MiB);
        m.release(c);
        // 70 MiB: 100 >= 70 + 20, so a new segment.
        (void)m.allocate(70 * MiB);
        QCOMPARE(m.reserved(), 200 * MiB);
    }

    void deviceFullFreesCachedSegments()
    {
        CudaAllocatorSettings s;
        s.deviceBytes = 100 * MiB;
        CudaAllocatorModel m(s);
        const int a = m.allocate(40 * MiB), b = m.allocate(40 * MiB);
        (void)b;
        m.release(a); // 40 MiB cached
        // 50 MiB fits no cached block and the device has 20 MiB left: the
        // cached 40 MiB segment is freed and the request retried.
        const int c = m.allocate(50 * MiB);
        QVERIFY(c >= 0);
        QCOMPARE(m.reserved(), 90 * MiB);
        QCOMPARE(m.peakReserved(), 90 * MiB);
        QCOMPARE(m.segments(), 2);
        // Nothing cached is whole and free now: out of memory.
        QCOMPARE(m.allocate(20 * MiB), -1);
        QCOMPARE(m.outOfMemory(), 1);
    }

    void expandableSegmentsGrowInPages()
    {
        CudaAllocatorSettings s;
        s.expandableSegments = true;
        CudaAllocatorModel m(s);
        // 30 MiB maps two 20 MiB pages of the large pool's segment.
        const int a = m.allocate(30 * MiB);
        QCOMPARE(m.reserved(), 40 * MiB);
        QCOMPARE(m.blockBytes(a), 30 * MiB); // 10 MiB left at the end, split off
        // 25 MiB: the free 10 MiB at the end grows by one page to 30 MiB.
        const int b = m.allocate(25 * MiB);
        QCOMPARE(m.reserved(), 60 * MiB);
        QCOMPARE(m.blockBytes(b), 25 * MiB);
        m.release(a);
        m.release(b);
        // Released space merges across the pages: 55 MiB in one block.
        (void)m.allocate(55 * MiB);
        QCOMPARE(m.reserved(), 60 * MiB);
        QCOMPARE(m.segments(), 1);
        // The same requests without expandable segments: three segments, 30+26+56.
        CudaAllocatorModel plain;
        const int p = plain.allocate(30 * MiB), q = plain.allocate(25 * MiB);
        plain.release(p);
        plain.release(q);
        (void)plain.allocate(55 * MiB);
        QCOMPARE(plain.reserved(), 30 * MiB + 26 * MiB + 56 * MiB);
    }

    void expandableTailPassedOverByMaxSplit()
    {
        // With max_split_size 64 MiB, a free 100 MiB tail is too large for a
        // 10 MiB request's best fit; the growing segment already holds it,
        // so nothing more is mapped (and nothing is unmapped).
        CudaAllocatorSettings s;
        s.expandableSegments = true;
        s.maxSplitSize = 64 * MiB;
        CudaAllocatorModel m(s);
        const int a = m.allocate(30 * MiB), b = m.allocate(30 * MiB), c = m.allocate(30 * MiB);
        QCOMPARE(m.reserved(), 100 * MiB); // 40 + 20 + 40: five pages
        m.release(a);
        m.release(b);
        m.release(c);
        const int mallocs = m.deviceMallocs();
        const int d = m.allocate(10 * MiB);
        QVERIFY(d >= 0);
        QCOMPARE(m.blockBytes(d), 10 * MiB);
        QCOMPARE(m.reserved(), 100 * MiB);
        QCOMPARE(m.deviceMallocs(), mallocs);
        QCOMPARE(m.allocated(), 10 * MiB);
    }
};

QTEST_APPLESS_MAIN(TestCudaAllocator)
#include "tst_cuda_allocator.moc"
