// Anchors the precompiled Qt Test header that most suites reuse
// (tests/CMakeLists.txt).
#include <QtTest>
