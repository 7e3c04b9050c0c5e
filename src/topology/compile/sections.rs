//! The passes of the compiler that check the sections rather than the
//! graph: each section's own checks, and those that span sections
//! (formats and schemas, retries, offset resets, tables, a source and a
//! sink at least).

use std::path::Path as FsPath;

use crate::config::de::Path;
use crate::config::yaml::Kind;
use crate::topology::model::{Format, KeyFormat};
use crate::topology::{Loader, Parsed};

impl Loader {
    /// Each section's own checks, which live beside its config type in
    /// [`crate::topology::model`] and [`crate::topology::security`]; and
    /// the checks that span sections.
    pub(super) fn check_sections(&mut self, parsed: &Parsed) {
        for (name, sink) in &parsed.sinks {
            let Some(sink) = sink else { continue };
            for (field, message) in sink.problems() {
                self.error_at(&["sinks".into(), name.clone(), field.into()], message);
            }
        }
        self.check_retries(parsed);
        if let Some(processing) = &parsed.processing {
            for (field, message) in processing.problems() {
                self.error_at(&["processing".into(), field.into()], message);
            }
        }
        if let Some(state) = &parsed.state {
            for (field, message) in state.problems() {
                self.error_at(&["state".into(), field.into()], message);
            }
        }
        self.check_formats(parsed);
        self.check_offset_reset(parsed);
        self.check_tables(parsed);
        if let Some(kafka) = &parsed.kafka {
            for (path, message) in kafka.security_problems() {
                let mut at = vec!["kafka".to_string()];
                at.extend(path);
                self.error_at(&at, message);
            }
            for (field, message) in kafka.internal_topics.problems() {
                let at = ["kafka".into(), "internal_topics".into(), field.into()];
                self.error_at(&at, message);
            }
        }
    }

    /// Retry settings make sense, and retries, which block processing, end
    /// well within a transaction.
    fn check_retries(&mut self, parsed: &Parsed) {
        let timeout = parsed
            .processing
            .as_ref()
            .map(|p| p.transaction_timeout.0)
            .unwrap_or(std::time::Duration::from_secs(60));
        let retries = parsed
            .processing
            .iter()
            .map(|p| {
                (
                    vec!["processing".to_string(), "retry".to_string()],
                    &p.retry,
                )
            })
            .chain(parsed.sources.iter().filter_map(|(name, c)| {
                let retry = c.as_ref()?.retry.as_ref()?;
                Some((
                    vec!["sources".to_string(), name.clone(), "retry".to_string()],
                    retry,
                ))
            }))
            .collect::<Vec<_>>();
        for (at, retry) in retries {
            for (field, message) in retry.problems() {
                let mut path = at.clone();
                path.push(field.to_string());
                self.error_at(&path, message);
            }
            if let Some(message) = retry.timeout_problem(timeout) {
                self.error_at(&at, message);
            }
        }
    }

    /// A topology reads at least one source and writes at least one sink
    /// (`run` subscribes to its first source).
    pub(super) fn check_not_empty(&mut self, parsed: &Parsed) {
        for (section, count, message) in [
            (
                "sources",
                parsed.sources.len(),
                "a topology needs at least one source: `run` would have nothing to read",
            ),
            (
                "sinks",
                parsed.sinks.len(),
                "a topology needs at least one sink: its results would be written nowhere",
            ),
        ] {
            // A missing section or one that is not a mapping is reported
            // already; entries that failed to parse still count. An empty
            // value (`sinks:`) has no position of its own: point at the key.
            let at = match self.root.entry(section) {
                Some((key, value)) => match &value.kind {
                    Kind::Null => Some(key.pos),
                    Kind::Map(entries) if entries.is_empty() && count == 0 => Some(value.pos),
                    _ => None,
                },
                None => None,
            };
            if let Some(pos) = at {
                self.push(pos, &Path::root().key(section), message.to_string());
            }
        }
    }

    /// One `offset_reset` for every source: `run` starts each input of a
    /// group without committed offsets where the first source says, so a
    /// different setting on another source would be silently ignored.
    fn check_offset_reset(&mut self, parsed: &Parsed) {
        let mut sources = parsed
            .sources
            .iter()
            .filter_map(|(name, source)| Some((name, source.as_ref()?.offset_reset)));
        let Some((first, reset)) = sources.next() else {
            return;
        };
        for (name, other) in sources.filter(|(_, other)| *other != reset) {
            self.error_at(
                &["sources".into(), name.clone(), "offset_reset".into()],
                format!(
                    "source `{name}` starts at `{}` but `{first}` at `{}`: every input of an \
                     application starts alike, so give every source the same `offset_reset`",
                    other.name(),
                    reset.name(),
                ),
            );
        }
    }

    /// A table is keyed by its record key.
    fn check_tables(&mut self, parsed: &Parsed) {
        for (name, source) in &parsed.sources {
            if let Some(source) = source
                && source.kind.is_table()
                && source.key_format == KeyFormat::None
            {
                self.error_at(
                    &["sources".into(), name.clone(), "key_format".into()],
                    "a table holds the latest value of each key: its records need their key, so `key_format: none` does not apply".into(),
                );
            }
        }
    }

    /// Avro needs a schema registry; Avro sinks name their schema files; and
    /// every schema file a topology names exists and is an Avro schema.
    fn check_formats(&mut self, parsed: &Parsed) {
        let at = |section: &str, name: &str, field: &str| -> Vec<String> {
            vec![section.into(), name.into(), field.into()]
        };
        if let Some(Some(registry)) = &parsed.schema_registry {
            for (field, message) in registry.problems() {
                self.error_at(&["schema_registry".into(), field.into()], message);
            }
        }
        // Where Avro is used, for the one "needs a registry" error.
        let mut avro_uses: Vec<Vec<String>> = Vec::new();
        // (where a schema file is named, the file)
        let mut files: Vec<(Vec<String>, &FsPath)> = Vec::new();
        // (a field set where it does not apply, what it applies with)
        let mut stray: Vec<(Vec<String>, &str)> = Vec::new();
        for (name, source) in &parsed.sources {
            let Some(source) = source else { continue };
            let avro = source.format == Format::Avro;
            if avro {
                avro_uses.push(at("sources", name, "format"));
            }
            if source.key_format == KeyFormat::Avro {
                avro_uses.push(at("sources", name, "key_format"));
            }
            match (&source.schema, avro) {
                (Some(file), true) => files.push((at("sources", name, "schema"), file)),
                (Some(_), false) => stray.push((at("sources", name, "schema"), "`format: avro`")),
                (None, _) => {}
            }
        }
        for (name, sink) in &parsed.sinks {
            let Some(sink) = sink else { continue };
            let value_avro = sink.format == Format::Avro;
            let key_avro = sink.key_format == KeyFormat::Avro;
            for (avro, field, schema_field, schema, applies) in [
                (
                    value_avro,
                    "format",
                    "schema",
                    &sink.schema,
                    "`format: avro`",
                ),
                (
                    key_avro,
                    "key_format",
                    "key_schema",
                    &sink.key_schema,
                    "`key_format: avro`",
                ),
            ] {
                if avro {
                    avro_uses.push(at("sinks", name, field));
                }
                match (schema, avro) {
                    (Some(file), true) => files.push((at("sinks", name, schema_field), file)),
                    (None, true) => self.error_at(
                        &at("sinks", name, field),
                        format!(
                            "an Avro sink needs `{schema_field}`: the `.avsc` file it writes with, such as `schemas/{}.avsc`",
                            sink.topic
                        ),
                    ),
                    (Some(_), false) => stray.push((at("sinks", name, schema_field), applies)),
                    (None, false) => {}
                }
            }
            if sink.register.is_some() && !value_avro && !key_avro {
                stray.push((
                    at("sinks", name, "register"),
                    "`format: avro` or `key_format: avro`",
                ));
            }
        }
        for (path, applies) in stray {
            let field = path.last().cloned().unwrap_or_default();
            self.error_at(&path, format!("`{field}` applies only with {applies}"));
        }
        if let (Some(first), Some(None)) = (avro_uses.first(), &parsed.schema_registry) {
            self.error_at(
                first,
                "Avro needs a schema registry: add a top-level `schema_registry` with its `url`"
                    .into(),
            );
        }
        for (path, file) in files {
            if let Err(message) = crate::record::avro::read_schema_file(file) {
                self.error_at(&path, message);
            }
        }
    }
}
