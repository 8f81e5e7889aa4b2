#!/bin/sh
# Writes the man page of PROGRAM (a built tractd or tractctl) on standard
# output, made by help2man from its --help text, with a section for each
# COMMAND given after it that has a --help of its own (`PROGRAM COMMAND --help`).
#   scripts/man.sh PROGRAM 'what it is, for NAME' [COMMAND...]
set -eu
program=$1
summary=$2
shift 2
name=$(basename "$program")
include=$(mktemp)
trap 'rm -f "$include"' EXIT

# Plain text as roff, kept line for line (.nf): backslashes escaped, and no
# line may start with a control character.
as_roff() {
	sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\&&/"
}

for command in "$@"; do
	printf '[%s %s]\n.nf\n' "$(echo "$name" | tr a-z A-Z)" "$(echo "$command" | tr a-z A-Z)"
	"$program" "$command" --help | as_roff
	printf '.fi\n'
done > "$include"
case $name in
tractd) see_also='.BR tractctl (1)' ;;
*) see_also='.BR tractd (1)' ;;
esac
printf '[SEE ALSO]\n%s,\nproto/API.md and README.md in the source tree.\n' "$see_also" >> "$include"
help2man --no-info --name="$summary" --include="$include" "$program"
