//! Every libtest verdict in one binary, for the parser's recorded transcripts (capture.sh):
//! pass, assertion failure, panic after output without a newline, ignored with and without a
//! reason, should_panic both ways, and a crash chosen at run time by $CRASH (abort, segv).

#[cfg(test)]
mod tests {
    #[test]
    fn passes() {
        println!("hello from passes");
    }

    #[test]
    fn fails_assert() {
        println!("some output before");
        let x = 2;
        assert_eq!(x + 1, 4, "x was {}", x);
    }

    #[test]
    fn panics() {
        print!("no newline here");
        panic!("boom: {}", 42);
    }

    #[test]
    #[ignore]
    fn ignored_plain() {}

    #[test]
    #[ignore = "needs a camera"]
    fn ignored_reason() {}

    #[test]
    #[should_panic]
    fn should_panic_ok() {
        panic!("expected");
    }

    #[test]
    #[should_panic(expected = "this text")]
    fn should_panic_fails() {}

    #[test]
    fn zz_crash() {
        if std::env::var("CRASH").as_deref() == Ok("abort") {
            println!("about to abort");
            std::process::abort();
        }
        if std::env::var("CRASH").as_deref() == Ok("segv") {
            print!("about to segv");
            unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u32>(), 1) };
        }
    }

    #[test]
    fn zz_last() {}
}
