#!/usr/bin/env bash
# Fails when a section citation ("contract §n", or the same in the older "SPEC" form) in the
# repository names no section of docs/contract.md, or when a file points outside the
# repository for the contract (../shared/SPEC.md, ../shared/seeds/), which a clone lacks.
# Usage: scripts/check_contract_refs.sh   (from anywhere inside a git checkout)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
contract=docs/contract.md
declare -A have=()
while IFS= read -r n; do have[$n]=1; done < <(sed -n 's/^## \([0-9][0-9]*\)\. .*/\1/p' "$contract")
[ ${#have[@]} -gt 0 ] || { echo "check_contract_refs: no '## n.' headings in $contract"; exit 1; }
status=0
# Every § in the repository is a contract citation; a line may cite several ("§2 and §6").
while IFS= read -r hit; do
  n=${hit##*§}
  # A lookup, not `printf | grep -q`: grep -q exits at the first match, and under pipefail the
  # writer's SIGPIPE then failed the check at random.
  if [ -z "${have[$n]:-}" ]; then
    echo "${hit%%:§*}: cites §$n, which $contract does not have"
    status=1
  fi
done < <(git grep -noE '§[0-9]+' -- ":!$contract")
if git grep -nE '\.\./shared/(SPEC|seeds)' -- ':!scripts/check_contract_refs.sh'; then
  echo "the lines above point outside the repository; cite $contract instead"
  status=1
fi
[ $status -eq 0 ] && echo "check_contract_refs: every § citation names a section of $contract"
exit $status
