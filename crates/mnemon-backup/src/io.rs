//! The file side: gzip by extension, the running checksum, and reading lines with a bound.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

use crate::error::BackupError;

/// The longest line a reader accepts. A record is one asset, one artifact or one message, so
/// this bounds an import's memory even when a damaged file has no newline at all.
pub const MAX_LINE_BYTES: u64 = 1 << 30;

/// Whether `path` names a gzip file (`.gz`).
pub(crate) fn is_gzip(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Where records go: the file (through gzip for `.gz`), with the checksum of what was written.
pub(crate) struct LineWriter {
    out: Box<dyn FinishWrite>,
    hash: Sha256,
    /// Uncompressed bytes written.
    pub(crate) bytes: u64,
}

/// A writer that must be finished (gzip writes its footer) and synced.
pub(crate) trait FinishWrite: Write {
    fn finish(self: Box<Self>) -> std::io::Result<()>;
}

impl FinishWrite for BufWriter<File> {
    fn finish(self: Box<Self>) -> std::io::Result<()> {
        let file = self.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
    }
}

impl FinishWrite for GzEncoder<BufWriter<File>> {
    fn finish(self: Box<Self>) -> std::io::Result<()> {
        let inner = (*self).finish()?;
        Box::new(inner).finish()
    }
}

impl LineWriter {
    /// A writer into `file`; gzip when `gzip`.
    pub(crate) fn new(file: File, gzip: bool) -> LineWriter {
        let buffered = BufWriter::with_capacity(1 << 16, file);
        let out: Box<dyn FinishWrite> = if gzip {
            Box::new(GzEncoder::new(buffered, Compression::fast()))
        } else {
            Box::new(buffered)
        };
        LineWriter {
            out,
            hash: Sha256::new(),
            bytes: 0,
        }
    }

    /// Writes `value` as one line, counted in the checksum when `hashed`.
    pub(crate) fn line(
        &mut self,
        value: &impl serde::Serialize,
        hashed: bool,
    ) -> Result<(), std::io::Error> {
        let mut sink = Sink {
            writer: self,
            hashed,
        };
        serde_json::to_writer(&mut sink, value).map_err(std::io::Error::other)?;
        sink.write_all(b"\n")
    }

    /// The checksum of the hashed lines so far, lowercase hex.
    pub(crate) fn digest(&self) -> String {
        hex(&self.hash.clone().finalize())
    }

    /// Flushes, finishes gzip and syncs the file.
    pub(crate) fn finish(self) -> std::io::Result<()> {
        self.out.finish()
    }
}

struct Sink<'a> {
    writer: &'a mut LineWriter,
    hashed: bool,
}

impl Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.writer.out.write(buf)?;
        if self.hashed {
            self.writer.hash.update(&buf[..n]);
        }
        self.writer.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.writer.out.flush()
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Reads a backup line by line, keeping the checksum of every line read before the current.
pub(crate) struct LineReader {
    input: Box<dyn BufRead>,
    hash: Sha256,
    /// The current line, without its newline.
    pub(crate) line: Vec<u8>,
    /// Its 1-based number.
    pub(crate) number: u64,
    /// Whether `line` holds a line not yet counted in `hash`.
    pending: bool,
}

impl LineReader {
    /// A reader of the file at `path` (through gzip for `.gz`).
    pub(crate) fn open(path: &Path) -> Result<LineReader, BackupError> {
        let file = File::open(path).map_err(BackupError::io(path))?;
        Ok(LineReader::of(file, path))
    }

    /// A reader of `file`, opened from `path`, from its start: each pass of an import reads
    /// the one file it opened, so that a file renamed over `path` meanwhile (a newer backup
    /// written to the same name) is not what the second pass writes.
    pub(crate) fn rewound(file: &File, path: &Path) -> Result<LineReader, BackupError> {
        let mut file = file.try_clone().map_err(BackupError::io(path))?;
        file.seek(SeekFrom::Start(0))
            .map_err(BackupError::io(path))?;
        Ok(LineReader::of(file, path))
    }

    /// A reader of `file` where it stands, through gzip when `path` says `.gz`.
    fn of(file: File, path: &Path) -> LineReader {
        let input: Box<dyn BufRead> = if is_gzip(path) {
            Box::new(BufReader::with_capacity(
                1 << 16,
                MultiGzDecoder::new(BufReader::new(file)),
            ))
        } else {
            Box::new(BufReader::with_capacity(1 << 16, file))
        };
        LineReader {
            input,
            hash: Sha256::new(),
            line: Vec::new(),
            number: 0,
            pending: false,
        }
    }

    /// The checksum of every line before the current one, lowercase hex.
    pub(crate) fn digest_before(&self) -> String {
        hex(&self.hash.clone().finalize())
    }

    /// Moves to the next line: `None` at the end of the file, else whether the line ended with
    /// its newline (a last line without one was cut short).
    pub(crate) fn next(&mut self, path: &Path) -> Result<Option<bool>, BackupError> {
        // The previous line joins the checksum only now, so that at the trailer the
        // checksum is of the lines before it.
        if std::mem::take(&mut self.pending) {
            self.hash.update(&self.line);
            self.hash.update(b"\n");
        }
        self.line.clear();
        let read = (&mut self.input)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut self.line)
            .map_err(|error| match error.kind() {
                // gzip cut short, or not gzip at all.
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidInput => {
                    BackupError::Damaged {
                        line: self.number + 1,
                        reason: format!("the compressed stream is damaged: {error}"),
                    }
                }
                _ => BackupError::io(path)(error),
            })?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        let complete = self.line.last() == Some(&b'\n');
        if complete {
            self.line.pop();
        } else if self.line.len() as u64 > MAX_LINE_BYTES {
            return Err(BackupError::Damaged {
                line: self.number,
                reason: format!("the line is longer than {MAX_LINE_BYTES} bytes"),
            });
        }
        self.pending = true;
        Ok(Some(complete))
    }
}
