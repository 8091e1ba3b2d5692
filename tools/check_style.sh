#!/usr/bin/env bash
# The repository's style checks, run by tools/test.sh before the builds:
#   format   every C++/CUDA file under src, tests, bench, fuzz and tools as clang-format 14 formats
#            it with the repository's .clang-format;
#   length   no source file (C++/CUDA, scripts, CMake; tests included) over 800 lines;
#   tested   every "Tested in" comment (or "tested in" inside a sentence) names files that exist.
# Prints each offending file and exits 1 if any check fails.
#   tools/check_style.sh          all three checks
#   tools/check_style.sh --fix    reformat the C++/CUDA files that fail the first check, then check
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
max_lines=800
dirs=(src tests bench fuzz tools)

fix=0
[[ "${1:-}" == --fix ]] && fix=1

# The files git knows of or would add (untracked, not ignored), so build trees never count.
list_files() {
  git ls-files --cached --others --exclude-standard -- "${dirs[@]}" | sort -u | while read -r f; do
    [[ -f "$f" ]] && printf '%s\n' "$f"
  done
}
mapfile -t all_files < <(list_files)
mapfile -t cxx_files < <(printf '%s\n' "${all_files[@]}" | grep -E '\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh)$')
mapfile -t source_files < <(printf '%s\n' "${all_files[@]}" |
  grep -E '(\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh|py|sh|js|mjs|cmake)|/CMakeLists\.txt)$' |
  grep -vE '(^|/)(node_modules|fixtures)/')

failed=0

# ---- format --------------------------------------------------------------------------------------
# Another major version formats differently, so only 14 (Debian 12's) is accepted.
formatter=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null && "$c" --version | grep -qE 'version 14\.'; then
    formatter=$c
    break
  fi
done
echo "== format: clang-format 14 with .clang-format (${#cxx_files[@]} files) =="
if [[ -z "$formatter" ]]; then
  echo "clang-format 14 was not found (tools/deps.sh installs it)"
  failed=1
elif ! "$formatter" --style=file --dump-config >/dev/null; then
  echo "$formatter cannot read .clang-format"
  failed=1
else
  # In batches of 16 files over every core: each batch names the files clang-format would change,
  # in one short write, so that the batches' lines do not interleave.
  # shellcheck disable=SC2016 # $0 and $@ are the inner shell's
  mapfile -t unformatted < <(printf '%s\0' "${cxx_files[@]}" |
    xargs -0 -n 16 -P "$(nproc)" sh -c '"$0" --style=file --dry-run --Werror "$@" 2>&1 |
      sed -nE "s/^(.+):[0-9]+:[0-9]+: error: .*clang-format-violations.*/\1/p" | sort -u' "$formatter" |
    sort)
  if ((fix && ${#unformatted[@]})); then
    "$formatter" --style=file -i "${unformatted[@]}"
    echo "reformatted ${#unformatted[@]} files"
    unformatted=()
  fi
  for f in "${unformatted[@]}"; do echo "not formatted: $f"; done
  if ((${#unformatted[@]})); then
    echo "${#unformatted[@]} files differ from clang-format's output (tools/check_style.sh --fix, or $formatter -i FILE)"
    failed=1
  fi
fi

# ---- length --------------------------------------------------------------------------------------
echo "== length: at most $max_lines lines a source file (${#source_files[@]} files) =="
long=0
for f in "${source_files[@]}"; do
  n=$(wc -l <"$f")
  if ((n > max_lines)); then
    echo "too long: $f ($n lines)"
    long=$((long + 1))
  fi
done
if ((long)); then
  echo "$long files over $max_lines lines: split them by concern"
  failed=1
fi

# ---- "Tested in" ---------------------------------------------------------------------------------
# A "Tested in" comment and the comment lines that continue its sentence; each path in it under one
# of the repository's top folders must exist (a file or a folder).
echo '== tested: every "Tested in" comment names files that exist =='
missing=$(python3 - "${cxx_files[@]}" <<'PY'
import glob, os, re, sys
top = ("src/", "tests/", "bench/", "fuzz/", "tools/", "docs/", "cmake/")
path_re = re.compile(r"(?<![\w./-])((?:%s)[\w./*+-]*[\w/*])" % "|".join(re.escape(t) for t in top))
comment_re = re.compile(r"^\s*(//+|\*|/\*+)\s?(.*)$")
for name in sys.argv[1:]:
    with open(name, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = comment_re.match(lines[i])
        found = m and re.search(r"[Tt]ested in ", m.group(2))
        if not found:
            i += 1
            continue
        start = i
        text = m.group(2)[found.start():]
        # The sentence goes on until a period that ends it or the comment ends.
        while not re.search(r"\.(\s|$)", text.rstrip() + "\n") and i + 1 < len(lines):
            m = comment_re.match(lines[i + 1])
            if not m or not m.group(2).strip():
                break
            i += 1
            text += " " + m.group(2)
        end = re.search(r"\.(\s|$)", text)
        sentence = text[: end.start() + 1] if end else text
        for p in path_re.findall(sentence):
            if not glob.glob(p.rstrip("/")):
                print(f"missing: {name}:{start + 1} names {p}, which does not exist")
        i += 1
PY
)
if [[ -n "$missing" ]]; then
  printf '%s\n' "$missing"
  failed=1
fi

if ((failed)); then
  echo "== style checks failed =="
  exit 1
fi
echo "== style checks passed =="
