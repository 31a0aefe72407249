#!/usr/bin/env bash
# Build one of the three published C/C++ pairwise-ranking SVM peers that the
# side-by-side benchmarks compare streamrank against.
#
#   usage: bash tools/peers/build.sh SRC_DIR [OUT_DIR]
#
# SRC_DIR is an unpacked source tree of ONE of the peers below (or a .zip /
# .tar.gz / .tgz archive of it).  The script recognises the peer from the files
# in the tree, copies the tree to OUT_DIR/build (the source tree itself is never
# touched), builds it there with the tree's own Makefile (its own -O3 flags,
# make -j1 unless MAKE_JOBS is set), copies the binaries into OUT_DIR and
# writes OUT_DIR/VERSION (peer name, version string found in the source, and
# the git commit when SRC_DIR lies inside a git checkout).
# OUT_DIR defaults to ./peers-bin/<peer>.  No network access is needed.
#
# Where the sources come from (official download pages):
#   liblinear-ranksvm  Lee & Lin, "Large-scale linear RankSVM": NTU CSIE
#                      "LIBSVM Tools" page (www.csie.ntu.edu.tw/~cjlin/libsvmtools/,
#                      section "Large-scale linear/kernel rankSVM"),
#                      file liblinear-ranksvm-<ver>.zip (e.g. 1.95, 2.1, 2.11).
#                      Adds solver -s 8 (L2-regularized L2-loss RankSVM) to LIBLINEAR.
#   libsvm-ranksvm     Kuo, Lee & Lin, "Large-scale kernel RankSVM" (SDM 2014):
#                      same LIBSVM Tools page, file libsvm-ranksvm-<ver>.zip
#                      (e.g. 3.20).  Kernel RankSVM (svm_type 0, "l2r_rank").
#   svm_rank           Joachims, SVMrank: www.cs.cornell.edu/people/tj/svm_light/svm_rank.html,
#                      source archive svm_rank.tar.gz (download.joachims.org/svm_rank/current/).
#                      Builds svm_rank_learn / svm_rank_classify.
#
# The peers' sources, the build trees and the binaries are kept OUTSIDE this
# repository (e.g. under /work/peers/) and are never committed: the licences
# (SVMrank: no redistribution without the author's permission) do not allow it
# and the repository must not carry third-party code.  Only this script is
# tracked.  If OUT_DIR is left at its default while running from the repo
# root, ./peers-bin/ is created there: do not add it to git.
#
# Build fixes applied on the command line only (no source edits):
#   * svm_rank:        SFLAGS=-fcommon  (the 2008-era code relies on common
#                      symbols; gcc >= 10 defaults to -fno-common and fails to link).
#                      SFLAGS is the hook the SVMrank Makefiles provide for extra flags.
#   * libsvm-ranksvm:  CC="gcc -fcommon" for the bundled f2c BLAS (same reason).
#                      OpenMP stays on (tree default); pass PEER_MAKE_ARGS="NO_OPENMP=1"
#                      to build without it, and set OMP_NUM_THREADS when benchmarking.
#   * CRLF line endings in the copied tree (some mirrors have them) are
#     normalised in the scratch copy only.
#
# Environment knobs: MAKE_JOBS (default 1), CC/CXX (default gcc/g++),
# PEER_MAKE_ARGS (extra make arguments, appended verbatim),
# KEEP_BUILD=0 to delete OUT_DIR/build after a successful build.
set -euo pipefail

die() { echo "build.sh: error: $*" >&2; exit 1; }

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage 2
case "$1" in -h|--help) usage 0 ;; esac

SRC_IN=$1
[ -e "$SRC_IN" ] || die "SRC_DIR '$SRC_IN' does not exist"

MAKE_JOBS=${MAKE_JOBS:-1}
CC_BIN=${CC:-gcc}
CXX_BIN=${CXX:-g++}
KEEP_BUILD=${KEEP_BUILD:-1}
read -r -a EXTRA_ARGS <<< "${PEER_MAKE_ARGS:-}"

for tool in make "$CC_BIN" "$CXX_BIN" cp find sed; do
    command -v "${tool%% *}" >/dev/null 2>&1 || die "'$tool' not found (install build-essential)"
done

TMP_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/peer-build.XXXXXX")
cleanup() { rm -rf "$TMP_ROOT"; }
trap cleanup EXIT

# --- resolve SRC_DIR (directory, or archive unpacked into a temp dir) -------
ARCHIVE=""
if [ -f "$SRC_IN" ]; then
    ARCHIVE=$(cd "$(dirname "$SRC_IN")" && pwd)/$(basename "$SRC_IN")
    mkdir -p "$TMP_ROOT/unpack"
    case "$SRC_IN" in
        *.tar.gz|*.tgz|*.tar) tar -xf "$SRC_IN" -C "$TMP_ROOT/unpack" ;;
        *.zip)
            if command -v unzip >/dev/null 2>&1; then unzip -q "$SRC_IN" -d "$TMP_ROOT/unpack"
            else python3 -m zipfile -e "$SRC_IN" "$TMP_ROOT/unpack"; fi ;;
        *) die "'$SRC_IN' is a file but not a .zip/.tar.gz/.tgz/.tar archive" ;;
    esac
    SRC=$TMP_ROOT/unpack
    # descend into a single top-level directory (svm_rank.tar.gz has none)
    entries=("$SRC"/*)
    if [ ${#entries[@]} -eq 1 ] && [ -d "${entries[0]}" ]; then SRC=${entries[0]}; fi
else
    SRC=$(cd "$SRC_IN" && pwd)
fi

# --- recognise the peer -------------------------------------------------------
has() { local f; for f in "$@"; do [ -f "$SRC/$f" ] || return 1; done; }

PEER=""
if has linear.cpp linear.h tron.cpp train.c predict.c Makefile \
   && grep -q 'L2R_L2LOSS_RANKSVM' "$SRC/linear.h"; then
    PEER=liblinear-ranksvm
elif has svm.cpp svm.h svm-train.c svm-predict.c tron.cpp selectiontree.cpp Makefile \
   && grep -q 'L2R_RANK' "$SRC/svm.h"; then
    PEER=libsvm-ranksvm
elif has svm_struct_api.c svm_struct_api_types.h svm_struct_learn_custom.c Makefile \
        svm_struct/svm_struct_main.c svm_struct/svm_struct_learn.c \
        svm_light/svm_common.c svm_light/svm_learn.c svm_light/svm_hideo.c \
   && grep -q 'INST_NAME *"SVM-rank"' "$SRC/svm_struct_api_types.h"; then
    PEER=svm_rank
fi

if [ -z "$PEER" ]; then
    cat >&2 <<EOF
build.sh: error: '$SRC_IN' is none of the three supported peers.
  Expected one of:
    liblinear-ranksvm : linear.cpp linear.h tron.cpp train.c predict.c Makefile,
                        with L2R_L2LOSS_RANKSVM in linear.h   (liblinear-ranksvm-*.zip)
    libsvm-ranksvm    : svm.cpp svm.h svm-train.c svm-predict.c tron.cpp selectiontree.cpp
                        Makefile, with L2R_RANK in svm.h      (libsvm-ranksvm-*.zip)
    svm_rank          : svm_struct_api.c svm_struct_api_types.h (INST_NAME "SVM-rank"),
                        svm_struct/, svm_light/, Makefile     (svm_rank.tar.gz)
  Plain LIBLINEAR / LIBSVM / SVM-light / other SVM-struct instances are not accepted.
EOF
    exit 1
fi

OUT_DIR=${2:-./peers-bin/$PEER}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
case "$OUT_DIR/" in
    "$SRC"/*) die "OUT_DIR ($OUT_DIR) must not lie inside SRC_DIR ($SRC)" ;;
esac

# --- version string from the source ----------------------------------------------
def() {  # def FILE MACRO -> value of '#define MACRO value' (quotes stripped)
    sed -n "s/^[[:space:]]*#[[:space:]]*define[[:space:]]\{1,\}$2[[:space:]]\{1,\}//p" "$SRC/$1" \
        | tr -d '\r' | head -n1 | sed 's/[[:space:]]*$//; s/^"//; s/"$//'
}
case "$PEER" in
    liblinear-ranksvm)
        v=$(def linear.h LIBLINEAR_VERSION)
        VERSION_STR="LIBLINEAR_VERSION ${v:-unknown (not defined in linear.h)}"
        BINARIES=(train predict svm-scale)
        MAKE_ARGS=(CC="$CC_BIN" CXX="$CXX_BIN" train predict svm-scale) ;;
    libsvm-ranksvm)
        v=$(def svm.h LIBSVM_VERSION)
        VERSION_STR="LIBSVM_VERSION ${v:-unknown (not defined in svm.h)}"
        BINARIES=(svm-train svm-predict svm-scale)
        MAKE_ARGS=(CC="$CC_BIN -fcommon" CXX="$CXX_BIN" all) ;;
    svm_rank)
        VERSION_STR="$(def svm_struct_api_types.h INST_NAME) $(def svm_struct_api_types.h INST_VERSION) ($(def svm_struct_api_types.h INST_VERSION_DATE)); SVM-struct $(def svm_struct/svm_struct_common.h STRUCT_VERSION) ($(def svm_struct/svm_struct_common.h STRUCT_VERSION_DATE)); SVM-light $(def svm_light/svm_common.h VERSION) ($(def svm_light/svm_common.h VERSION_DATE))"
        BINARIES=(svm_rank_learn svm_rank_classify)
        MAKE_ARGS=(CC="$CC_BIN" LD="$CC_BIN" SFLAGS=-fcommon all) ;;
esac

# --- provenance -----------------------------------------------------------------------
GIT_LINES=""
PROBE=${SRC_IN}   # archives are not probed: their directory's repo says nothing about them
if [ -z "$ARCHIVE" ] && command -v git >/dev/null 2>&1 \
   && git -C "$PROBE" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    g_commit=$(git -C "$PROBE" rev-parse HEAD 2>/dev/null || echo unknown)
    g_top=$(git -C "$PROBE" rev-parse --show-toplevel)
    g_prefix=$(git -C "$PROBE" rev-parse --show-prefix)
    g_remote=$(git -C "$PROBE" config --get remote.origin.url 2>/dev/null || true)
    g_dirty=$(git -C "$PROBE" status --porcelain --untracked-files=no -- . 2>/dev/null | wc -l | tr -d ' ')
    GIT_LINES="git_commit=$g_commit
git_toplevel=$g_top
git_path=${g_prefix:-.}
git_remote=${g_remote:-none}
git_modified_tracked_files_under_path=$g_dirty"
fi
TREE_SHA=$(cd "$SRC" && find . -type f ! -path './.git/*' \( -name '*.c' -o -name '*.cpp' -o -name '*.h' -o -name 'Makefile' \) \
            -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)

# --- copy to scratch and build -----------------------------------------------------------
BUILD=$OUT_DIR/build
rm -rf "$BUILD"
mkdir -p "$BUILD"
(cd "$SRC" && tar -cf - --exclude=.git .) | (cd "$BUILD" && tar -xf -)
chmod -R u+w "$BUILD"
# normalise CRLF in sources/Makefiles of the copy (some mirrors carry CRLF)
find "$BUILD" -type f \( -name '*.c' -o -name '*.cpp' -o -name '*.h' -o -name 'Makefile' \) \
    -exec sed -i 's/\r$//' {} +

echo "build.sh: peer=$PEER  version=[$VERSION_STR]"
echo "build.sh: building in $BUILD (make -j$MAKE_JOBS$(printf ' %q' "${MAKE_ARGS[@]}" "${EXTRA_ARGS[@]}"))"
LOG=$OUT_DIR/build.log
(
    cd "$BUILD"
    # remove any objects/binaries shipped in the tree so everything is rebuilt
    make clean >/dev/null 2>&1 || true
    rm -f "${BINARIES[@]}"
    make -j"$MAKE_JOBS" "${MAKE_ARGS[@]}" "${EXTRA_ARGS[@]}"
) > "$LOG" 2>&1 || { tail -n 30 "$LOG" >&2; die "make failed for $PEER (full log: $LOG)"; }

for b in "${BINARIES[@]}"; do
    [ -x "$BUILD/$b" ] || die "expected binary '$b' was not produced (log: $LOG)"
    cp -f "$BUILD/$b" "$OUT_DIR/$b"
done

{
    echo "peer=$PEER"
    echo "version=$VERSION_STR"
    echo "source_dir=$SRC_IN"
    [ -n "$ARCHIVE" ] && echo "source_archive=$ARCHIVE"
    echo "source_tree_sha256=$TREE_SHA  (sha256 over sorted *.c *.cpp *.h Makefile)"
    if [ -n "$GIT_LINES" ]; then echo "$GIT_LINES"; else echo "git_commit=none (not a git checkout)"; fi
    echo "binaries=${BINARIES[*]}"
    echo "make_args=-j$MAKE_JOBS$(printf ' %q' "${MAKE_ARGS[@]}" "${EXTRA_ARGS[@]}")"
    echo "compiler_cc=$("${CC_BIN%% *}" --version 2>/dev/null | head -n1)"
    echo "compiler_cxx=$("${CXX_BIN%% *}" --version 2>/dev/null | head -n1)"
    echo "built_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host=$(uname -srm)"
} > "$OUT_DIR/VERSION"

[ "$KEEP_BUILD" = 0 ] && rm -rf "$BUILD"

echo "build.sh: ok -> $OUT_DIR (${BINARIES[*]}, VERSION)"
cat "$OUT_DIR/VERSION"
