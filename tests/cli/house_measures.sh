#!/bin/bash
# The house's measures, read from the tree, against the ratchet tests/house_measures.txt:
# each may stay or go down, never up (lower the file when one goes down).
#   room_cycles      pairs of rooms (engine/<room>/, iouring/, numa/) whose headers include
#                    each other, directly or through other rooms
#   stream_fields    the most fields one struct of engine/stream/ has (a declaration of
#                    several names counts each)
#   runtime_reaches  rt. and rt-> field accesses in engine/cli/ and engine/serve/: the
#                    commands and the server reaching into the runtime's fields
#   quiet_skips      a passing test saying part of it did not run: a line of tests/cli/*.sh
#                    or tests/unit/*.c that prints "skip: ...", "not run", "not exercised",
#                    "not tested" or "skipped" (not a count of them) with no exit 77 on it or
#                    the two lines after
source "$(dirname "$0")/lib.sh"
cd "$K3_ROOT" || exit 1
ratchet=tests/house_measures.txt
[[ -r $ratchet ]] || fail "no $ratchet"

room_cycles() {
  local edges
  edges=$(grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"(engine/[a-z_0-9]+|iouring|numa)/' \
            engine/*/*.[ch] iouring/*.[ch] numa/*.[ch] |
          awk -F: '{ split($1, f, "/"); split(substr($2, index($2, "\"") + 1), t, "/")
                     from = f[1] == "engine" ? f[1] "/" f[2] : f[1]
                     to = t[1] == "engine" ? t[1] "/" t[2] : t[1]
                     if (from != to) print from, to }' | sort -u)
  awk '{ room[$1]; room[$2]; reach[$1, $2] = 1 }
       END {
         for (k in room) for (i in room) if ((i, k) in reach) for (j in room)
           if ((k, j) in reach) reach[i, j] = 1
         n = 0
         for (i in room) for (j in room)
           if (i < j && (i, j) in reach && (j, i) in reach) { n++; pairs = pairs " " i "<->" j }
         print n pairs
       }' <<<"$edges"
}

stream_fields() {
  cat engine/stream/*.[ch] | awk '
    # Comments out, then each struct body: its declarations at its own depth, a comma
    # outside parentheses (a function pointer'"'"'s parameters) adding a name.
    {
      line = $0
      out = ""
      for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (incomment) {
          if (c == "*" && substr(line, i + 1, 1) == "/") { incomment = 0; i++ }
          continue
        }
        if (c == "/" && substr(line, i + 1, 1) == "*") { incomment = 1; i++; continue }
        if (c == "/" && substr(line, i + 1, 1) == "/") break
        out = out c
      }
      text = text out "\n"
    }
    END {
      depth = 0; parens = 0; head = ""; best = 0; name = ""
      for (i = 1; i <= length(text); i++) {
        c = substr(text, i, 1)
        if (c == "{") {
          if (!inside && head ~ /struct[ \t\n]+[A-Za-z_0-9]+[ \t\n]*$/) {
            inside = 1; base = depth + 1; fields = 0
            cur = head; sub(/[ \t\n]*$/, "", cur); sub(/.*struct[ \t\n]+/, "", cur)
          }
          depth++; head = ""; continue
        }
        if (c == "}") {
          depth--
          if (inside && depth < base) {
            inside = 0
            if (fields > best) { best = fields; name = cur }
          }
          head = ""; continue
        }
        if (c == ";") { if (inside && depth == base && parens == 0) fields++; head = ""; continue }
        if (c == "(") parens++
        if (c == ")") parens--
        if (c == "," && inside && depth == base && parens == 0) fields++
        head = head c
      }
      print best " struct " name
    }'
}

runtime_reaches() {
  grep -ohE '\brt(\.|->)[A-Za-z_]' engine/cli/*.[ch] engine/serve/*.[ch] | wc -l
}

quiet_skips() {
  awk '
    function flush(k) {
      for (k = 1; k <= n_held; k++) if (held[k] != "") { quiet = quiet " " held[k]; count++ }
      n_held = 0
    }
    FNR == 1 { flush() }
    # a line that prints a partial skip, unless an exit 77 comes within two lines
    /(^|[^a-z_])(echo|printf|fprintf|puts|say|note)[ (]/ &&
      (/(echo|printf) +"skip:/ || /not run|not exercised|not tested|[^$_a-z]skipped([^_a-z]|$)/) &&
      !/\$[a-z_]+ skipped/ {
      held[++n_held] = FILENAME ":" FNR; until[n_held] = FNR + 2
    }
    /exit 77|exit\(77\)|return 77|SKIP\(/ {
      for (k = 1; k <= n_held; k++) if (FNR <= until[k]) held[k] = ""
    }
    END { flush(); print count + 0 quiet }' tests/cli/*.sh tests/unit/*.c
}

declare -A got
read -r got[room_cycles] cycles <<<"$(room_cycles)"
read -r got[stream_fields] biggest <<<"$(stream_fields)"
got[runtime_reaches]=$(runtime_reaches)
read -r got[quiet_skips] quiet <<<"$(quiet_skips)"
declare -A about=([room_cycles]="$cycles" [stream_fields]="$biggest" [quiet_skips]="$quiet")

seen=0
while read -r name limit _; do
  [[ -z $name || $name == \#* ]] && continue
  seen=$((seen + 1))
  [[ -n ${got[$name]:-} ]] || { fail "$ratchet: no measure named $name"; continue; }
  echo "$name ${got[$name]} (at most $limit)${about[$name]:+: ${about[$name]}}"
  if ((got[$name] > limit)); then
    fail "$name went up to ${got[$name]}, over the $limit $ratchet allows${about[$name]:+: ${about[$name]}}"
  elif ((got[$name] < limit)); then
    echo "  $name went down: lower it to ${got[$name]} in $ratchet"
  fi
done <"$ratchet"
((seen == ${#got[@]})) || fail "$ratchet names $seen measures, the script makes ${#got[@]}"
finish
