#!/usr/bin/env bash
# Fails when a source file includes a header of a higher floor (scripts/floors.txt)
# or another folder's private detail header, unless the include is one of the
# known ones being removed (scripts/floors-known.txt).
#
#   scripts/check-floors.sh              # the checkout this script is in
#   scripts/check-floors.sh --root DIR   # another tree with the same layout
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ "${1:-}" == "--root" ]]; then root="$(cd "$2" && pwd)"; fi
cd "$root"

declare -A floor_of_prefix name_of_floor
prefixes=()
while read -r number name rest; do
  [[ -z "$number" || "$number" == \#* ]] && continue
  name_of_floor[$number]=$name
  for prefix in $rest; do
    floor_of_prefix[$prefix]=$number
    prefixes+=("$prefix")
  done
done < scripts/floors.txt

# The floor of a path (longest matching prefix), or empty.
floor_of() {
  local best="" best_len=0 p
  for p in "${prefixes[@]}"; do
    if [[ "$1" == "$p"* && ${#p} -gt $best_len ]]; then best=${floor_of_prefix[$p]}; best_len=${#p}; fi
  done
  echo "$best"
}

declare -A known seen_known
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  known["$line"]=1
done < scripts/floors-known.txt

status=0 files=0 includes=0 tolerated=0
roots=(); for d in engine backends layers distribution bin examples bench; do [[ -d $d ]] && roots+=("$d"); done
while IFS= read -r file; do
  files=$((files + 1))
  floor=$(floor_of "$file")
  if [[ -z "$floor" ]]; then
    echo "check-floors: $file belongs to no floor: add its folder to scripts/floors.txt"
    status=1
    continue
  fi
  while IFS= read -r header; do
    # Includes are relative to the source root, or to the including file's folder.
    if [[ ! -e "$header" && -e "$(dirname "$file")/$header" ]]; then header="$(dirname "$file")/$header"; fi
    [[ -e "$header" ]] || continue  # a library's header
    includes=$((includes + 1))
    target=$(floor_of "$header")
    problem=""
    if [[ -n "$target" && "$target" -gt "$floor" ]]; then
      problem="floor $floor (${name_of_floor[$floor]}) includes floor $target (${name_of_floor[$target]})"
    elif [[ "$(basename "$header")" == detail.hpp && "$(dirname "$header")" != "$(dirname "$file")" ]]; then
      problem="$(dirname "$header")'s detail.hpp is private to its folder"
    fi
    [[ -z "$problem" ]] && continue
    if [[ -n "${known["$file -> $header"]:-}" ]]; then
      seen_known["$file -> $header"]=1
      tolerated=$((tolerated + 1))
      continue
    fi
    echo "check-floors: $file includes $header: $problem"
    status=1
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find "${roots[@]}" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.h' \) | sort)

for entry in "${!known[@]}"; do
  if [[ -z "${seen_known[$entry]:-}" ]]; then
    echo "check-floors: '$entry' is listed in scripts/floors-known.txt but no longer breaks a floor: delete the line"
    status=1
  fi
done
echo "check-floors: $files files, $includes includes of the project's headers, $tolerated known upward includes (scripts/floors-known.txt)$([[ $status == 0 ]] && echo ": ok" || echo ": FAILED")"
exit $status
