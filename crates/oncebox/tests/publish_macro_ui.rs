//! `#[oncebox::publish]` misuses are compile errors that say what to do instead. Each file under
//! `tests/ui/publish/` is one misuse; its `.stderr` is the expected message.

#[test]
fn misuses_of_publish_are_compile_errors_that_say_what_to_do() {
    trybuild::TestCases::new().compile_fail("tests/ui/publish/*.rs");
}
