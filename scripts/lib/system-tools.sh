# The shell side of scripts/system-tools.tsv: source it, then ask for a
# tool with tool_path NAME. It defines functions only.

system_tools_file="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/system-tools.tsv"

# tool_entry NAME sets tool_package, tool_listed_path and tool_group from
# the list; it returns 1 when NAME is not on it.
tool_entry() {
	local name package path group _used
	while IFS=$'\t' read -r name package path group _used; do
		[[ -z $name || $name == \#* || $name == name ]] && continue
		if [[ $name == "$1" ]]; then
			tool_package=$package tool_listed_path=$path tool_group=$group
			return 0
		fi
	done <"$system_tools_file"
	return 1
}

# tool_names [GROUP...] prints the names on the list, of the given groups
# only when some are given.
tool_names() {
	local name package path group _used g
	while IFS=$'\t' read -r name package path group _used; do
		[[ -z $name || $name == \#* || $name == name ]] && continue
		if [[ $# -eq 0 ]]; then echo "$name"; continue; fi
		for g in "$@"; do [[ $g == "$group" ]] && echo "$name"; done
	done <"$system_tools_file"
	return 0
}

# tool_installed NAME prints where NAME is and succeeds when it is there.
tool_installed() {
	tool_entry "$1" || return 1
	if [[ $tool_listed_path == - ]]; then
		command -v "$1"
	else
		[[ -e $tool_listed_path ]] && echo "$tool_listed_path"
	fi
}

# tool_install_hint prints how to install the tool tool_entry last found.
tool_install_hint() {
	case $tool_group in
	bench) echo "bash bench/scripts/peers.sh install (apt-get install $tool_package)" ;;
	*) echo "go run mage.go deps (apt-get install $tool_package)" ;;
	esac
}

# tool_path NAME prints the path of the declared tool NAME. It fails loudly
# when NAME is not on the list or not installed, naming the package and the
# command that installs it.
tool_path() {
	if ! tool_entry "$1"; then
		echo "system tools: $1 is not on $system_tools_file: declare it there (name, Debian package, path, group) so that a new machine installs it" >&2
		return 1
	fi
	tool_installed "$1" && return 0
	echo "system tools: $1 is not installed (Debian package $tool_package): run $(tool_install_hint)" >&2
	return 1
}
