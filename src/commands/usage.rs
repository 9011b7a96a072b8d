//! Usage errors: a flag or value the command cannot take (`retain --days 0`, `--table` without
//! `--format sqlite`). They exit 2, as clap's own parse errors do, where I/O errors exit 1.

/// A usage error's message; [`super::exit_code`] maps it to 2.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// `message` as a usage error (exit 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}
