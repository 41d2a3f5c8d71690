//! The helper every test uses to find a program from outside the toolchains.
mod common;

use common::{find_tool, require_tool, system_tools_list, TempDir};

#[test]
fn a_listed_installed_program_is_found() {
    assert!(require_tool("kill").ends_with("kill"));
}

#[test]
fn a_program_not_on_the_list_is_refused_even_when_installed() {
    let err = find_tool("sh", &system_tools_list()).unwrap_err();
    assert!(err.starts_with("sh is not on "), "{err}");
    assert!(err.contains("system-tools.tsv: declare it there"), "{err}");
}

#[test]
fn a_missing_program_names_its_package_and_the_install_command() {
    let dir = TempDir::new();
    let list = dir.0.join("tools.tsv");
    std::fs::write(
        &list,
        "# comment\nname\tpackage\tpath\tgroup\tused by\n\
         monolock-no-such-program\tmonolock-test-package\t-\ttest\tthis test\n",
    )
    .unwrap();
    assert_eq!(
        find_tool("monolock-no-such-program", &list).unwrap_err(),
        "monolock-no-such-program is not installed (Debian package monolock-test-package): \
         run go run mage.go deps (apt-get install monolock-test-package)"
    );
}
