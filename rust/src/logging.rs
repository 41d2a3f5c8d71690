//! Log lines through the `log` crate (feature `log`), under the target
//! `monolock`. Without the feature the macros log nothing and cost nothing;
//! their arguments still count as used.

/// `log_at!(warn, "...", args)`: a `log::warn!` when the feature is on.
macro_rules! log_at {
    ($level:ident, $($arg:tt)+) => {{
        #[cfg(feature = "log")]
        ::log::$level!(target: "monolock", $($arg)+);
        #[cfg(not(feature = "log"))]
        let _ = format_args!($($arg)+);
    }};
}
