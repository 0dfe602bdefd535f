#!/usr/bin/env bash
# test_install_consumer.sh: a program of a user's, outside the repository, builds on an installed
# libcohort the ways docs/library.md names: pkg-config (shared, and --static on libcohort.a) and
# CMake's find_package(cohort) (cohort::cohort and cohort::cohort_static), and runs; each
# installed header compiles on its own as C99, C11 and C++17, with C linkage in C++; the shared
# library exports exactly the functions the headers declare, the installed static library shows
# no other global name, and a program with its own json_parse and crc32c links on it; the
# soname (major.minor while the major version is 0) is what the install links to and what a
# program linked on it names.
set -u
build=${COHORT_BUILD_DIR:?run through ctest}
cohort=${COHORT:?run through ctest}
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
skips=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
skip() { echo "SKIP $1: $2"; skips=$((skips + 1)); }
finish() {
    echo "$fails failed, $skips skipped"
    [ "$fails" -eq 0 ] || exit 1
    [ "$skips" -eq 0 ] || exit 77
    exit 0
}
command -v "$cc" >/dev/null || { echo "SKIP all: no C compiler '$cc'"; exit 77; }

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
    { fail "cmake --install: $(tail -3 "$work/install.log")"; finish; }
libdir=$(dirname "$(ls "$prefix"/lib*/libcohort.so | head -1)")
version=$("$cohort" --version | awk '{print $2}')
IFS=. read -r major minor patch <<<"$version"
# a sanitized libcohort needs its runtime linked into the program
san=()
grep -qs '^COHORT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && san=(-fsanitize=address,undefined)
grep -qs '^COHORT_TSAN:BOOL=ON' "$build/CMakeCache.txt" && san=(-fsanitize=thread)

# The user's program: every installed header, the version, and an error status with its message.
{
    for h in "$prefix"/include/cohort/*.h; do echo "#include <cohort/${h##*/}>"; done
    cat <<'C'
#include <stdio.h>
int main(void)
{
    const coh_backend *be = NULL;
    coh_status s = coh_backend_find("abacus", &be);
    printf("cohort %s\n", coh_version());
    /* the headers' version at compile time, checked against the library's at run time */
    printf("headers %s (%d), library %d\n", COH_VERSION_STRING, COH_VERSION_NUMBER,
           coh_version_number());
    printf("%s: %s\n", coh_status_name(s), coh_last_error());
    return s == COH_ERR_INVALID ? 0 : 1;
}
C
} >"$work/user.c"
number=$((major * 10000 + minor * 100 + patch))
want="cohort $version
headers $version ($number), library $number
invalid argument: invalid device 'abacus': valid: cpu, cuda, cpu-guarded"

# expect_run WHAT PROGRAM: it runs from another folder and prints what the library says.
expect_run() {
    local out
    out=$(cd / && "$2" 2>&1)
    if [ $? -eq 0 ] && [ "$out" = "$want" ]; then
        echo "ok   $1"
    else
        fail "$1: printed '$out', want '$want'"
    fi
}
# expect_no_shared WHAT PROGRAM: a static link left no need of libcohort.so.
expect_no_shared() {
    if ldd "$2" | grep -q 'libcohort\.so'; then
        fail "$1 needs libcohort.so: $(ldd "$2" | grep libcohort)"
    fi
}

# ---- the soname: under semantic versioning a 0.x minor release may break the ABI, so while the
# major version is 0 the soname is libcohort.so.MAJOR.MINOR, and from 1.0 libcohort.so.MAJOR;
# the install links libcohort.so -> soname -> the file, and a program names the soname ----
soname="libcohort.so.$major"
[ "$major" -eq 0 ] && soname="libcohort.so.$major.$minor"
# elf_entries KIND FILE: FILE's dynamic entries of KIND (SONAME, NEEDED), one a line
elf_entries() {
    if command -v readelf >/dev/null; then
        readelf -d "$2" | sed -n "s/.*($1).*\[\(.*\)\]\$/\1/p"
    else
        objdump -p "$2" | awk -v kind="$1" '$1 == kind {print $2}'
    fi
}
elf_tool=""
command -v objdump >/dev/null && elf_tool=objdump
command -v readelf >/dev/null && elf_tool=readelf
# expect_needs WHAT PROGRAM: the program names the soname, the file a later patch replaces
expect_needs() {
    [ -n "$elf_tool" ] || return 0
    local needed
    needed=$(elf_entries NEEDED "$2" | grep '^libcohort')
    [ "$needed" = "$soname" ] && echo "ok   $1 needs $needed" ||
        fail "$1 needs '$needed', want '$soname'"
}
if [ -z "$elf_tool" ]; then
    skip "soname" "no readelf or objdump"
else
    got=$(elf_entries SONAME "$libdir/libcohort.so")
    [ "$got" = "$soname" ] && echo "ok   $elf_tool: libcohort.so's soname is $got" ||
        fail "libcohort.so's soname is '$got', want '$soname' (version $version)"
fi
link_dev=$(readlink "$libdir/libcohort.so")
link_so=$(readlink "$libdir/$soname")
if [ "$link_dev" = "$soname" ] && [ "$link_so" = "libcohort.so.$version" ] &&
    [ -f "$libdir/libcohort.so.$version" ] && [ ! -L "$libdir/libcohort.so.$version" ]; then
    echo "ok   installed libcohort.so -> $link_dev -> $link_so"
else
    fail "installed links: libcohort.so -> '$link_dev', $soname -> '$link_so'," \
        "want libcohort.so -> $soname -> libcohort.so.$version (a file):" \
        "$(cd "$libdir" && ls -l libcohort.so* | awk '{print $9, $10, $11}' | tr '\n' ' ')"
fi

# ---- libcohort.so exports the functions the public headers declare, no more and no fewer: an
# internal helper's name (file_*, json_*, crc32c, coh_shm_open, ...) would clash with, or be
# interposed by, a program's function of the same name, and would become API ----
exported=""
command -v nm >/dev/null &&
    exported=$(nm -D --defined-only "$libdir/libcohort.so" | awk '$2 == "T" {print $3}' | sort)
if [ -z "$exported" ]; then
    skip "exports and C linkage" "no nm, or it read no functions from libcohort.so"
else
    leaked=$(nm -D --defined-only "$libdir/libcohort.so" |
        awk '$3 !~ /^coh_/ || $2 != "T" {print $3}')
    # what the headers declare, read here apart from the build's list: the names called like
    # functions in their text without comments, that the build's whole static library defines
    # (a macro or a static inline function is no symbol of it)
    defined=$(nm -g --defined-only "$build/libcohort.a" | awk 'NF == 3 && $2 == "T" {print $3}')
    declared=$(for h in "$prefix"/include/cohort/*.h; do
        "$cc" -fpreprocessed -dD -E -P -x c "$h"
    done | grep -o '\bcoh_[a-z0-9_]*[[:space:]]*(' | tr -d ' (' | sort -u |
        grep -Fxf <(echo "$defined"))
    undeclared=$(comm -23 <(echo "$exported") <(echo "$declared"))
    unexported=$(comm -13 <(echo "$exported") <(echo "$declared"))
    if [ -z "$leaked" ] && [ -z "$undeclared" ] && [ -z "$unexported" ]; then
        echo "ok   libcohort.so exports the $(wc -l <<<"$exported") functions the headers declare"
    else
        [ -z "$leaked" ] || fail "libcohort.so exports $(wc -l <<<"$leaked") names that are no" \
            "coh_ function: $(head -8 <<<"$leaked" | tr '\n' ' ')"
        [ -z "$undeclared" ] || fail "libcohort.so exports $(wc -l <<<"$undeclared") functions" \
            "no installed header declares: $(head -8 <<<"$undeclared" | tr '\n' ' ')"
        [ -z "$unexported" ] || fail "libcohort.so does not export $(wc -l <<<"$unexported")" \
            "declared functions: $(head -8 <<<"$unexported" | tr '\n' ' ')"
    fi
    # libcohort.a, an archive, would keep every object's globals: the installed one shows the
    # same names as libcohort.so and no others
    archived=$(nm -g --defined-only "$libdir/libcohort.a" | awk 'NF == 3 {print $3}' | sort)
    extra=$(comm -23 <(echo "$archived") <(echo "$exported"))
    missing=$(comm -13 <(echo "$archived") <(echo "$exported"))
    if [ -z "$extra" ] && [ -z "$missing" ]; then
        echo "ok   libcohort.a's global names are libcohort.so's $(wc -l <<<"$archived")"
    else
        [ -z "$extra" ] || fail "libcohort.a defines $(wc -l <<<"$extra") global names" \
            "libcohort.so does not export: $(head -8 <<<"$extra" | tr '\n' ' ')"
        [ -z "$missing" ] || fail "libcohort.a lacks $(wc -l <<<"$missing") of libcohort.so's" \
            "names: $(head -8 <<<"$missing" | tr '\n' ' ')"
    fi
fi

# ---- each installed header on its own: C99 and C11 with -pedantic, and C++17, where every
# function it declares must have C linkage (a C++ program that takes their addresses links
# against libcohort.so only when the header wraps them in extern "C") ----
cxx=${CXX:-c++}
command -v "$cxx" >/dev/null || { skip "C++ headers" "no C++ compiler '$cxx'"; cxx=""; }
headers_ok=0
for h in "$prefix"/include/cohort/*.h; do
    name=${h##*/}
    printf '#include <cohort/%s>
int main(void) { return 0; }
' "$name" >"$work/one.c"
    bad=""
    for std in c99 c11; do
        "$cc" -std=$std -Wall -Wextra -pedantic -Werror -fsyntax-only -I"$prefix/include" \
            "$work/one.c" 2>"$work/cc.log" || bad="$bad -std=$std: $(head -3 "$work/cc.log")"
    done
    if [ -n "$cxx" ]; then
        # the names it declares: its text without comments (the compiler strips them), called
        # like functions, that the library defines
        funcs=$("$cc" -fpreprocessed -dD -E -P -x c "$h" | grep -o '\bcoh_[a-z0-9_]*[[:space:]]*(' |
            tr -d ' (' | sort -u | grep -Fxf <(echo "$exported"))
        {
            echo "#include <cohort/$name>"
            echo "typedef void (*any_fn)();"
            echo "static const any_fn refs[] = {"
            for f in $funcs; do echo "    reinterpret_cast<any_fn>(&$f),"; done
            echo "    nullptr};"
            echo "int main() { return refs[0] == nullptr && sizeof refs > sizeof(any_fn); }"
        } >"$work/one.cpp"
        "$cxx" -std=c++17 -Wall -Wextra -pedantic -Werror "${san[@]}" -I"$prefix/include" \
            "$work/one.cpp" -L"$libdir" -lcohort -o "$work/one" 2>"$work/cc.log" ||
            bad="$bad -std=c++17: $(grep -m3 'error\|undefined' "$work/cc.log")"
    fi
    if [ -n "$bad" ]; then
        fail "cohort/$name on its own:$bad"
    else
        headers_ok=$((headers_ok + 1))
    fi
done
headers_all=$(ls "$prefix"/include/cohort/*.h | wc -l)
[ "$headers_ok" -eq "$headers_all" ] &&
    echo "ok   all $headers_all installed headers compile on their own as C99, C11${cxx:+ and C++17}"

# ---- pkg-config ----
if command -v pkg-config >/dev/null; then
    export PKG_CONFIG_PATH="$libdir/pkgconfig"
    got=$(pkg-config --modversion cohort 2>&1)
    [ "$got" = "$version" ] && echo "ok   pkg-config --modversion cohort: $got" ||
        fail "pkg-config --modversion cohort: '$got', want '$version'"
    # shellcheck disable=SC2046 # the flags are words
    if "$cc" -std=c99 -Wall -Wextra -pedantic -Werror "${san[@]}" $(pkg-config --cflags cohort) \
        "$work/user.c" $(pkg-config --libs cohort) -Wl,-rpath,"$libdir" -o "$work/user_pc" \
        2>"$work/cc.log"; then
        expect_run "pkg-config: a C99 program on the shared libcohort" "$work/user_pc"
        expect_needs "pkg-config: the C99 program" "$work/user_pc"
    else
        fail "pkg-config shared build: $(head -5 "$work/cc.log")"
    fi
    # --static: libcohort.a by name (-l:), and the libraries it needs from Libs.private
    static_libs=$(pkg-config --static --libs cohort | sed 's/-lcohort\b/-l:libcohort.a/')
    # shellcheck disable=SC2046,SC2086
    if "$cc" -std=c11 -Wall -Wextra -pedantic -Werror "${san[@]}" $(pkg-config --cflags cohort) \
        "$work/user.c" $static_libs -o "$work/user_pc_static" 2>"$work/cc.log"; then
        expect_run "pkg-config --static: a C11 program on libcohort.a" "$work/user_pc_static"
        expect_no_shared "pkg-config --static" "$work/user_pc_static"
    else
        fail "pkg-config --static build: $(head -5 "$work/cc.log")"
    fi
    # A program with its own json_parse and crc32c, the names of two of libcohort's helpers:
    # linked on libcohort.a it must neither be refused (duplicate definitions) nor lend them to
    # the library, which checksums and parses a safetensors file with its own.
    cat >"$work/clash.c" <<'C'
#include <stdio.h>
#include <cohort/checkpoint.h>
int json_parse(const char *text) { return text[0] == '{' ? 42 : -1; }
unsigned crc32c(const char *text) { return text[0] == 'x' ? 7u : 0u; }
int main(int argc, char **argv)
{
    const float weights[3] = {1.5f, -2.0f, 0.25f};
    coh_st_tensor t = {.name = "w", .dtype = COH_ST_F32, .ndim = 1, .shape = {3}, .data = weights};
    coh_st_file *f = NULL;
    float back[3] = {0};
    if (argc < 2 || coh_st_save(argv[1], &t, 1, NULL, 0) != COH_OK ||
        coh_st_open(argv[1], &f) != COH_OK || !coh_st_has_checksum(f) ||
        coh_st_read(f, "w", COH_ST_F32, 1, t.shape, back) != COH_OK) {
        fprintf(stderr, "clash: %s\n", coh_last_error());
        return 1;
    }
    coh_st_close(f);
    printf("own %d %u, library %g %g %g\n", json_parse("{}"), crc32c("x"), back[0], back[1],
           back[2]);
    return 0;
}
C
    # shellcheck disable=SC2046,SC2086
    if "$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" $(pkg-config --cflags cohort) \
        "$work/clash.c" $static_libs -o "$work/clash" 2>"$work/cc.log"; then
        out=$("$work/clash" "$work/clash.safetensors" 2>&1)
        if [ "$out" = "own 42 7, library 1.5 -2 0.25" ]; then
            echo "ok   a program with its own json_parse and crc32c links on libcohort.a and runs"
        else
            fail "a program with its own json_parse and crc32c on libcohort.a printed '$out'"
        fi
    else
        fail "a program with its own json_parse and crc32c does not link on libcohort.a:" \
            "$(grep -m3 'error\|multiple\|undefined' "$work/cc.log")"
    fi
    # a C++ program on the same headers and library
    if [ -n "$cxx" ]; then
        cp "$work/user.c" "$work/user.cpp"
        # shellcheck disable=SC2046
        if "$cxx" -std=c++17 -Wall -Wextra -pedantic -Werror "${san[@]}" \
            $(pkg-config --cflags cohort) "$work/user.cpp" $(pkg-config --libs cohort) \
            -Wl,-rpath,"$libdir" -o "$work/user_cxx" 2>"$work/cc.log"; then
            expect_run "pkg-config: a C++17 program on the shared libcohort" "$work/user_cxx"
        else
            fail "pkg-config C++ build: $(grep -m5 'error\|undefined' "$work/cc.log")"
        fi
    fi
else
    skip "pkg-config" "no pkg-config program"
fi

# ---- CMake: find_package(cohort) ----
mkdir -p "$work/cmake-user"
cp "$work/user.c" "$work/cmake-user/"
cat >"$work/cmake-user/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(cohort_user LANGUAGES C)
find_package(cohort $version REQUIRED CONFIG)
add_executable(user_shared user.c)
target_link_libraries(user_shared PRIVATE cohort::cohort)
add_executable(user_static user.c)
target_link_libraries(user_static PRIVATE cohort::cohort_static)
CMAKE
san_flags="${san[*]}"
if cmake -S "$work/cmake-user" -B "$work/cmake-user/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san_flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$san_flags" >"$work/cmake.log" 2>&1 &&
    cmake --build "$work/cmake-user/build" >>"$work/cmake.log" 2>&1; then
    expect_run "find_package(cohort): cohort::cohort" "$work/cmake-user/build/user_shared"
    expect_needs "find_package(cohort): cohort::cohort" "$work/cmake-user/build/user_shared"
    expect_run "find_package(cohort): cohort::cohort_static" "$work/cmake-user/build/user_static"
    expect_no_shared "cohort::cohort_static" "$work/cmake-user/build/user_static"
else
    fail "find_package(cohort) build: $(grep -m5 -i 'error' "$work/cmake.log")"
fi
finish
