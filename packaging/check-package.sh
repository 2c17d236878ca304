#!/usr/bin/env bash
# Builds the .deb from a configured build tree and checks it holds what a
# desktop install needs. Usage: packaging/check-package.sh BUILD_DIR
set -euo pipefail
build=$1
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls -t "$build"/trainbench_*.deb | head -1)
contents=$(dpkg-deb -c "$deb")
status=0
for want in ./usr/bin/trainbench ./usr/bin/trainbench-cli ./usr/share/applications/trainbench.desktop \
            ./usr/share/icons/hicolor/scalable/apps/trainbench.svg ./usr/share/trainbench/examples/default.json \
            ./usr/lib/trainbench/libtb_sentencepiece.so ./usr/lib/trainbench/trainbench-cli-torch \
            ./usr/share/trainbench/programs/torch1/gpt-learned.json; do
  if grep -q " $want\$" <<<"$contents"; then echo "package: has $want"; else echo "package: MISSING $want"; status=1; fi
done
depends=$(dpkg-deb -f "$deb" Depends)
for dep in libtorch1.13 libqt6widgets6 libqcustomplot2.1-qt6 libsqlite3-0 libonig5 libicu72 libgloo0 libsentencepiece0; do
  grep -q "$dep" <<<"$depends" || { echo "package: Depends lacks $dep"; status=1; }
done
# Unpacked, the two programs of trainbench-cli find each other: the front
# answers a LibTorch-free command itself and hands --version on to
# lib/trainbench/trainbench-cli-torch (app/CMakeLists.txt).
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
dpkg-deb -x "$deb" "$unpacked"
if version=$("$unpacked/usr/bin/trainbench-cli" --version 2>&1) && [[ $version == *"(LibTorch "* ]] &&
   "$unpacked/usr/bin/trainbench-cli" validate --help >/dev/null 2>&1; then
  echo "package: the unpacked trainbench-cli runs: $version"
else
  echo "package: the unpacked trainbench-cli does not run: $version"; status=1
fi
# The memory planner starts from the step programs the package ships: the
# bundled example in fp32 is one of their kinds.
if plan=$("$unpacked/usr/bin/trainbench-cli" estimate --derived --precision fp32 --json \
            --config "$unpacked/usr/share/trainbench/examples/default.json" 2>/dev/null) &&
   [[ $plan == *"this build's programs"* ]]; then
  echo "package: the planner starts from the shipped step programs"
else
  echo "package: the planner does not start from the shipped step programs"; status=1
fi
echo "package: $(basename "$deb") $(du -h "$deb" | cut -f1), Depends: $depends"
exit $status
