#!/bin/bash
# The commands README.md and docs/*.md show work, and the options they name exist.
#
# Conventions (docs/README.md states them for writers):
# - a line of a fenced block that starts with `./k3-uring` (after any NAME=VALUE
#   assignments) is run, in doc order, in a fresh folder per file where `./k3-uring` is the
#   binary, README.md, bench/, docs/ and tests/ the repository's, `k3-tiny` the seed-1 tiny model
#   (README's own folder has none: its synth line makes it) and `/mnt/...` a temporary folder (`/mnt/nvme0` to `/mnt/nvme7` and
#   `/mnt/box0/nvme0` to `/mnt/box3/nvme3` exist);
# - a line that cannot run on k3-tiny here (serve, mpirun, real drives, big models) says
#   `[skip: REASON]` in its comment; skips are counted and listed, and any other line that
#   shows `./k3-uring` must be runnable;
# - every `--option` of a fenced k3-uring line, and of a `k3-uring ...` or `COMMAND ...`
#   code span in the text, is in that command's --help; a code span that starts with
#   `--` names an option of some command.
# Fails naming the file, line and command or option.
source "$(dirname "$0")/lib.sh"
root=${K3_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
base="$K3_TEST_TMP/docs_commands"
rm -rf "$base" && mkdir -p "$base"

docs=("$root/README.md" "$root"/docs/*.md)
[[ -f "${docs[0]}" && -f "${docs[1]}" ]] || fail "no README.md or docs/*.md under $root"

# The commands and their --help, from `k3-uring --help` itself.
mapfile -t commands < <("$K3" --help | awk '/^commands:/ {on = 1; next}
                                            on && /^  [a-z]/ {print $1} on && /^$/ {exit}')
((${#commands[@]} >= 7)) || fail "k3-uring --help lists ${#commands[@]} commands"
declare -A has  # "COMMAND --option" and "any --option", from every command's --help
for c in "${commands[@]}"; do
  h=$("$K3" "$c" --help) || fail "$c --help exited $?"
  for o in $(grep -oE -- '(^|[ ,])--[a-z][a-z0-9-]*' <<<"$h" | tr -d ' ,'); do
    has["$c $o"]=1 has["any $o"]=1
  done
done
((${#has[@]} > 50)) || fail "found only ${#has[@]} options in the commands' --help"

is_command() { local c; for c in "${commands[@]}"; do [[ "$1" == "$c" ]] && return 0; done; return 1; }

# check_options WHERE COMMAND WORDS...: each --option among WORDS is in COMMAND's --help.
check_options() {
  local where=$1 cmd=$2 w opt; shift 2
  for w in "$@"; do
    [[ "$w" =~ ^--[a-z][a-z0-9-]*(=|$) ]] || continue
    opt=${w%%=*}
    [[ -n "${has["$cmd $opt"]:-}" ]] || fail "$where: $opt is not an option of $cmd (k3-uring $cmd --help)"
  done
}

# words_into ARRAY TEXT: TEXT split as the shell would (quotes kept together, a backslash
# escapes the next character, nothing expanded), as `xargs printf` split it, words before
# an open quote included, in the shell itself: the docs have hundreds of lines and spans.
words_into() {
  local -n into=$1
  local text=$2 word="" in_word=0 c i quote=""
  into=()
  for ((i = 0; i < ${#text}; i++)); do
    c=${text:i:1}
    if [[ -n $quote ]]; then
      if [[ $c == "$quote" ]]; then quote=""; else word+=$c; fi
    elif [[ $c == [\"\'] ]]; then
      quote=$c in_word=1
    elif [[ $c == \\ ]]; then
      i=$((i + 1)) in_word=1
      word+=${text:i:1}
    elif [[ $c == [[:space:]] ]]; then
      ((in_word)) && into+=("$word")
      word="" in_word=0
    else
      word+=$c in_word=1
    fi
  done
  [[ -n $quote ]] && return 0 # as xargs: the words before an open quote
  ((in_word)) && into+=("$word")
  return 0
}

# check_command_words WHERE WORDS...: WORDS start at k3-uring; the command is the next word,
# or run (`k3-uring -m DIR ...` is run).
check_command_words() {
  local where=$1 cmd=run; shift
  if [[ $# -gt 0 ]] && is_command "$1"; then cmd=$1; shift; fi
  check_options "$where" "$cmd" "$@"
}

# The fenced lines of FILE that show ./k3-uring, as "LINE<TAB>TEXT".
fenced_commands() {
  awk '/^[[:space:]]*```/ {fence = !fence; next}
       fence && /(^|[[:space:]=])\.\/k3-uring([[:space:]]|$)/ {print FNR "\t" $0}' "$1"
}

# The code spans of FILE's text outside fences, as "LINE<TAB>SPAN" (a span may go on to
# the next line of its paragraph; LINE is where it ends).
prose_spans() {
  awk '/^[[:space:]]*```/ {fence = !fence; carry = ""; next}
       fence {next}
       /^[[:space:]]*$/ {carry = ""; next}
       { line = carry == "" ? $0 : carry " " $0
         while (match(line, /`[^`]+`/)) {
           print FNR "\t" substr(line, RSTART + 1, RLENGTH - 2)
           line = substr(line, RSTART + RLENGTH) }
         open = index(line, "`"); carry = open ? substr(line, open) : "" }' "$1"
}

# check_doc DOC: runs DOC's commands in its own folder and checks the options of its commands
# and code spans; the counts of commands run and skipped in that folder's file "counts".
check_doc() {
  local doc=$1 name work n line where cmd w i reason run log start rc span opt ran=0 skipped=0
  name=${doc#"$root"/}
  work="$base/${name//\//_}"
  mkdir -p "$work"/mnt/nvme{0..7} "$work"/mnt/box{0..3}/nvme{0..3}
  ln -s "$K3" "$work/k3-uring"
  ln -s "$root/README.md" "$root/bench" "$root/docs" "$root/tests" "$work/"
  [[ "$name" == README.md ]] || ln -s "$tiny" "$work/k3-tiny"
  while IFS=$'\t' read -r n line; do
    where="$name:$n"
    cmd=$(sed -E 's/[[:space:]]+#.*$//; s/^[[:space:]]+//' <<<"$line")
    words_into w "$cmd"
    i=0
    while [[ $i -lt ${#w[@]} && "${w[$i]}" != ./k3-uring ]]; do i=$((i + 1)); done
    check_command_words "$where" "${w[@]:$((i + 1))}"

    if [[ "$line" == *"[skip: "* ]]; then
      skipped=$((skipped + 1))
      reason=${line##*\[skip: }
      echo "skip: $where: ${reason%%]*}"
      continue
    fi
    if ! [[ "$cmd" =~ ^([A-Za-z_][A-Za-z0-9_]*=(\"[^\"]*\"|[^[:space:]]*)[[:space:]]+)*\./k3-uring([[:space:]]|$) ]]; then
      fail "$where: shows ./k3-uring after another command; run it alone or mark it [skip: REASON]: $cmd"
      continue
    fi
    [[ "$cmd" == *\\ ]] && { fail "$where: a command continued on the next line; keep it on one: $cmd"; continue; }
    if grep -qE "(^|[[:space:],=\"'])/" <<<"${cmd//\/mnt\//}"; then
      fail "$where: an absolute path other than /mnt/...; use /mnt/ or k3-tiny, or mark it [skip: REASON]: $cmd"
      continue
    fi
    run="${cmd//\/mnt\//$work/mnt/}"
    ran=$((ran + 1))
    log="$work/line$n.log"
    start=$SECONDS
    (cd "$work" && timeout 120 bash -c "$run") </dev/null >"$log" 2>&1 && rc=0 || rc=$?
    echo "ran: $where ($((SECONDS - start)) s): $cmd"
    if ((rc)); then
      fail "$where: exit $rc from: $cmd"
      tail -5 "$log" | sed 's/^/      /'
    fi
  done < <(fenced_commands "$doc")

  while IFS=$'\t' read -r n span; do
    [[ "$span" == *--* ]] || continue
    words_into w "$span"
    [[ ${#w[@]} -gt 0 ]] || continue
    case ${w[0]} in
      ./k3-uring | k3-uring) check_command_words "$name:$n" "${w[@]:1}" ;;
      --[a-z]*)
        opt=${w[0]%%=*}
        [[ -n "${has["any $opt"]:-}" ]] || fail "$name:$n: $opt is not an option of any command (\`$span\`)" ;;
      *) is_command "${w[0]}" && [[ ${#w[@]} -gt 1 ]] && check_options "$name:$n" "${w[@]}" ;;
    esac
  done < <(prose_spans "$doc")
  echo "$ran $skipped" >"$work/counts"
}

# The files are independent (a folder each), K3_TEST_PAR at a time; the commands of one
# file run in order, as a reader would.
tiny=$(tiny_model)
for doc in "${docs[@]}"; do concurrently check_doc "$doc"; done
wait_concurrent
ran=0 skipped=0
for doc in "${docs[@]}"; do
  name=${doc#"$root"/}
  read -r r s <"$base/${name//\//_}/counts" || { fail "$name: its commands were not all checked"; continue; }
  ran=$((ran + r)) skipped=$((skipped + s))
done

# Every link is relative (the repository explains itself) and points at one of its files,
# and an anchor at a heading there.
anchors() {  # FILE's headings as GitHub names their anchors
  sed -n 's/^#\{1,6\} //p' "$1" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'
}
links=0
for doc in "${docs[@]}"; do
  name=${doc#"$root"/}
  while IFS=: read -r n link; do
    [[ "$link" =~ ^[a-z]+: ]] && { fail "$name:$n: a link outside the repository: $link"; continue; }
    target=${link%%#*} anchor=${link#"$target"}
    path=$(dirname "$doc")/$target
    [[ -z "$target" ]] && path=$doc
    links=$((links + 1))
    [[ -e "$path" ]] || { fail "$name:$n: the link $link names no file"; continue; }
    [[ -z "$anchor" || "$path" != *.md ]] && continue
    grep -qx -- "${anchor#\#}" <(anchors "$path") || fail "$name:$n: the link $link names no heading of $target"
  done < <(grep -no '\]([^)]*)' "$doc" | sed 's/\](\(.*\))$/\1/')
done

echo "$ran commands run, $skipped skipped, $links links, from ${#docs[@]} files"
((ran >= 20)) || fail "only $ran commands ran: the docs show fewer than 20 runnable ones"
finish
