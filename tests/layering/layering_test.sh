#!/usr/bin/env bash
# tests/layering/layering_test.sh SOURCE_DIR: every #include of engine/ and shell/ follows the
# layer graph of docs/architecture.md ("Layer graph"): a folder includes its own headers and
# those of the folders it depends on, directly or through others; a third-party header named
# there is included only where it says. Prints each violation (file:line, what it includes,
# what that folder may include) and exits 1 on any.
set -euo pipefail
src=${1:?usage: layering_test.sh SOURCE_DIR}
doc=$src/docs/architecture.md

declare -A deps only
while read -r kind name rest; do
  name=${name%:}
  case $kind in
    layer) deps[$name]=$rest ;;
    only) only[$name]=$rest ;;
  esac
done < <(sed -n 's/^    \(layer\|only\) /\1 /p' "$doc")
((${#deps[@]} > 0)) || { echo "layering: no '    layer' lines in $doc"; exit 1; }

# closure FOLDER: the folders FOLDER may include (itself, its dependencies, theirs, ...).
declare -A allowed
closure() {
  local todo=("$1") seen=" $1 " d
  while ((${#todo[@]})); do
    d=${todo[0]}
    todo=("${todo[@]:1}")
    [[ -v deps[$d] ]] || { echo "layering: $d is used but has no 'layer' line in $doc"; exit 1; }
    for dep in ${deps[$d]}; do
      [[ $seen == *" $dep "* ]] && continue
      seen+="$dep "
      todo+=("$dep")
    done
  done
  allowed[$1]=$seen
}
for d in "${!deps[@]}"; do closure "$d"; done

# folder_of PATH: sets `folder` to its folder, engine/<name> or shell ("" otherwise); no
# subshell (a check of every include stays well under a second).
folder_of() {
  case $1 in
    engine/*) folder=${1#engine/}; folder="engine/${folder%%/*}" ;;
    shell/*) folder=shell ;;
    *) folder="" ;;
  esac
}

bad=0
checked=0
cd "$src"
declare -A seen_files
# One grep over every file (file:line:text), not a process per file.
while IFS=: read -r file line text; do
  folder_of "$file"
  from=$folder
  if [[ ! -v allowed[$from] ]]; then
    echo "$file: folder $from has no 'layer' line in $doc"
    bad=1
    continue
  fi
  [[ -v seen_files[$file] ]] || { seen_files[$file]=1; checked=$((checked + 1)); }
  if [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
    inc=${BASH_REMATCH[1]}
    folder_of "$inc"
    to=$folder
    [[ -z $to ]] && continue  # generated or third-party quoted headers
    if [[ ${allowed[$from]} != *" $to "* ]]; then
      echo "$file:$line: includes \"$inc\" ($to), above $from, which may include:${allowed[$from]}"
      bad=1
    fi
  elif [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<([^\>]+)\> ]]; then
    inc=${BASH_REMATCH[1]}
    for h in "${!only[@]}"; do
      [[ $inc == "$h" || $inc == "$h"/* ]] || continue
      ok=0
      for where in ${only[$h]}; do [[ $file == "$where" || $file == "$where"/* ]] && ok=1; done
      if ((!ok)); then
        echo "$file:$line: includes <$inc>, which only ${only[$h]} may include"
        bad=1
      fi
    done
  fi
done < <(grep -rn --include='*.h' --include='*.cpp' --include='*.c' \
           '^[[:space:]]*#[[:space:]]*include' engine shell | sort)

((checked > 0)) || { echo "layering: no files found under $src/engine and $src/shell"; exit 1; }
if ((bad)); then
  echo "layering: includes that break the layer graph of docs/architecture.md (above)"
  exit 1
fi
echo "layering: $checked files follow the layer graph"
