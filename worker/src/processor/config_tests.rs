//! Tests of the processor selection: the documented JSON form, defaults, refusals, and
//! agreement with the contract's validation.

use super::*;

fn parse(json: &str) -> ProcessorConfig {
    serde_json::from_str(json).unwrap()
}

#[test]
fn documented_json_form_parses_and_round_trips() {
    let c = parse(
        r#"{"key_field":"user","time_field":"ts","processor":{"kind":"aggregate",
            "value_field":"amount","window":{"type":"hopping","size_ms":60000,
            "advance_ms":20000},"grace_ms":5000}}"#,
    );
    assert_eq!(
        c.processor,
        ProcessorKind::Aggregate {
            value_field: "amount".into(),
            window: WindowSpec::Hopping {
                size_ms: 60_000,
                advance_ms: 20_000
            },
            grace_ms: 5_000
        }
    );
    let back: ProcessorConfig = serde_json::from_slice(&serde_json::to_vec(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    assert_eq!(c.build_processor().unwrap().kind(), "aggregate");
}

#[test]
fn defaults_and_other_kinds() {
    let c = parse(r#"{"key_field":"k","processor":{"kind":"count"}}"#);
    assert_eq!(c.time_field, None);
    assert_eq!(c.processor, ProcessorKind::Count {});
    assert_eq!(
        serde_json::to_string(&c.processor).unwrap(),
        r#"{"kind":"count"}"#
    );
    assert_eq!(c.build_processor().unwrap().kind(), "count");
    let c = parse(r#"{"key_field":"k","processor":{"kind":"aggregate","value_field":"v"}}"#);
    assert_eq!(
        c.processor,
        ProcessorKind::Aggregate {
            value_field: "v".into(),
            window: WindowSpec::None,
            grace_ms: 0
        }
    );
    assert!(
        c.build_processor().is_ok(),
        "unwindowed aggregate needs no time field"
    );
    let c = parse(r#"{"key_field":"k","time_field":"t","processor":{"kind":"dedup","ttl_ms":5}}"#);
    assert_eq!(c.build_processor().unwrap().kind(), "dedup");
}

#[test]
fn unknown_fields_and_kinds_are_rejected() {
    let bad = [
        r#"{"key_field":"k","processor":{"kind":"sum"}}"#,
        r#"{"key_field":"k","processor":{"kind":"count","extra":1}}"#,
        r#"{"key_field":"k","processor":{"kind":"count"},"extra":1}"#,
        r#"{"key_field":"k","processor":{"kind":"dedup"}}"#,
        r#"{"key_field":"k","processor":{"kind":"aggregate","value_field":"v","window":{"type":"session"}}}"#,
    ];
    for json in bad {
        assert!(
            serde_json::from_str::<ProcessorConfig>(json).is_err(),
            "{json}"
        );
    }
}

mod against_the_contract {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;
    use streamkeeper_contract::worker_config::{
        ProcessorConfig as Rendered, ProcessorKind as RenderedKind, WindowConfig,
    };
    use streamkeeper_contract::{Versioned, WorkerConfig};

    /// True when the worker's config check (`check-config`, and `run` before any task)
    /// accepts a config with this processor.
    fn config_accepts(processor: &Rendered) -> bool {
        let example = include_str!("../../../examples/worker-standalone.yaml");
        let mut config = WorkerConfig::from_yaml(example).unwrap();
        config.processor = processor.clone();
        config.check().is_ok()
    }

    /// Durations around the edges that matter: sub-millisecond, a few ms, whole seconds.
    fn duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            (0u64..3_000).prop_map(Duration::from_micros),
            (1u64..5_000).prop_map(Duration::from_millis),
            (1u64..7_200).prop_map(Duration::from_secs),
        ]
    }

    proptest! {
        /// One validation for both sides: a config the check accepts (the contract's rules,
        /// which the operator checks a spec with too) is one the worker's tasks can build;
        /// a task never loops on a refusal the check let through.
        #[test]
        fn the_worker_builds_every_window_the_contract_accepts(
            size in duration(),
            advance in proptest::option::of(duration()),
            grace in duration(),
        ) {
            let rendered = Rendered {
                key_field: "k".into(),
                time_field: Some("t".into()),
                kind: RenderedKind::Aggregate {
                    value_field: "v".into(),
                    window: Some(WindowConfig { size, advance, grace }),
                },
            };
            let accepted = config_accepts(&rendered);
            let built = ProcessorConfig::from(&rendered).build_processor().is_ok();
            prop_assert!(!accepted || built, "the contract accepts {rendered:?}, the worker refuses it");
        }

        #[test]
        fn the_worker_builds_every_dedup_the_contract_accepts(ttl in duration()) {
            let rendered = Rendered {
                key_field: "k".into(),
                time_field: Some("t".into()),
                kind: RenderedKind::Dedup { ttl },
            };
            let accepted = config_accepts(&rendered);
            let built = ProcessorConfig::from(&rendered).build_processor().is_ok();
            prop_assert!(!accepted || built, "the contract accepts {rendered:?}, the worker refuses it");
        }
    }
}

#[test]
fn invalid_configs_say_why() {
    let err = |json: &str| parse(json).build_processor().err().unwrap();
    assert_eq!(
        err(r#"{"key_field":"","processor":{"kind":"count"}}"#),
        ConfigError::EmptyField("key_field")
    );
    assert_eq!(
        err(r#"{"key_field":"k","processor":{"kind":"dedup","ttl_ms":5}}"#),
        ConfigError::NeedsTimeField("dedup")
    );
    assert_eq!(
        err(
            r#"{"key_field":"k","processor":{"kind":"aggregate","value_field":"v","window":{"type":"tumbling","size_ms":10}}}"#
        ),
        ConfigError::NeedsTimeField("aggregate")
    );
    assert_eq!(
        err(r#"{"key_field":"k","processor":{"kind":"aggregate","value_field":"v","grace_ms":5}}"#),
        ConfigError::GraceWithoutWindow
    );
    assert_eq!(
        err(
            r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate","value_field":"v","window":{"type":"hopping","size_ms":10,"advance_ms":4}}}"#
        ),
        ConfigError::Window(WindowError::NotAMultiple {
            size_ms: 10,
            advance_ms: 4
        })
    );
    assert_eq!(
        err(r#"{"key_field":"k","time_field":"t","processor":{"kind":"dedup","ttl_ms":0}}"#),
        ConfigError::Ttl(TtlError(0))
    );
}

mod joins {
    use super::*;
    use crate::processor::decode::RightDecoder;
    use crate::processor::join::{JoinConfigError, JoinKind, JoinMode};

    const STREAM: &str = r#"{"kind":"join","join":"stream","mode":"left",
        "right_key_field":"user_id","right_time_field":"at",
        "before_ms":5000,"after_ms":10000,"grace_ms":1000}"#;
    const TABLE: &str = r#"{"kind":"join","join":"table","mode":"inner","history_ms":86400000}"#;

    fn with(processor: &str) -> ProcessorConfig {
        parse(&format!(
            r#"{{"key_field":"user","time_field":"ts","processor":{processor}}}"#
        ))
    }

    /// `processor` with `edit` applied to its JSON object.
    fn edited(
        processor: &str,
        edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
    ) -> String {
        let mut value: serde_json::Value = serde_json::from_str(processor).unwrap();
        edit(value.as_object_mut().unwrap());
        value.to_string()
    }

    fn refusal(processor: &str) -> ConfigError {
        with(processor).build_processor().err().unwrap()
    }

    #[test]
    fn documented_join_forms_parse_round_trip_and_build() {
        let c = with(STREAM);
        assert_eq!(
            c.processor,
            ProcessorKind::Join {
                join: JoinKind::Stream,
                mode: JoinMode::Left,
                right_key_field: Some("user_id".into()),
                right_time_field: Some("at".into()),
                before_ms: Some(5_000),
                after_ms: Some(10_000),
                grace_ms: Some(1_000),
                history_ms: None,
            }
        );
        let back: ProcessorConfig =
            serde_json::from_slice(&serde_json::to_vec(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert_eq!(c.build_processor().unwrap().kind(), "join-stream");
        assert!(matches!(c.right_decoder(), Some(RightDecoder::Stream(_))));

        let c = with(TABLE);
        assert_eq!(
            serde_json::to_string(&c.processor).unwrap(),
            TABLE,
            "unset fields stay out"
        );
        assert_eq!(c.build_processor().unwrap().kind(), "join-table");
        assert!(matches!(c.right_decoder(), Some(RightDecoder::Table(_))));
        let c = edited(TABLE, |o| {
            o.insert("mode".into(), "left".into());
            o.insert("right_time_field".into(), "at".into());
        });
        assert!(with(&c).build_processor().is_ok());
        assert_eq!(
            parse(r#"{"key_field":"k","processor":{"kind":"count"}}"#).right_decoder(),
            None
        );
    }

    #[test]
    fn unknown_join_kinds_modes_and_fields_do_not_parse() {
        for bad in [
            edited(TABLE, |o| {
                o.insert("join".into(), "global_table".into());
            }),
            edited(TABLE, |o| {
                o.insert("mode".into(), "full".into());
            }),
            edited(TABLE, |o| {
                o.insert("window_ms".into(), 5.into());
            }),
            edited(TABLE, |o| {
                o.remove("mode");
            }),
        ] {
            let json = format!(r#"{{"key_field":"k","time_field":"t","processor":{bad}}}"#);
            assert!(
                serde_json::from_str::<ProcessorConfig>(&json).is_err(),
                "{json}"
            );
        }
    }

    #[test]
    fn a_table_join_refuses_outer_and_the_stream_settings() {
        use JoinKind::Table;
        let outer = edited(TABLE, |o| {
            o.insert("mode".into(), "outer".into());
        });
        assert_eq!(
            refusal(&outer),
            ConfigError::Join(JoinConfigError::UnsupportedMode {
                join: Table,
                mode: JoinMode::Outer
            })
        );
        for field in ["right_key_field", "before_ms", "after_ms", "grace_ms"] {
            let value: serde_json::Value = if field.ends_with("_ms") {
                1.into()
            } else {
                "id".into()
            };
            let c = edited(TABLE, |o| {
                o.insert(field.into(), value);
            });
            assert_eq!(
                refusal(&c),
                ConfigError::Join(JoinConfigError::NotApplicable { join: Table, field })
            );
        }
        let c = edited(TABLE, |o| {
            o.remove("history_ms");
        });
        assert_eq!(
            refusal(&c),
            ConfigError::Join(JoinConfigError::Missing {
                join: Table,
                field: "history_ms"
            })
        );
        let c = edited(TABLE, |o| {
            o.insert("history_ms".into(), 0.into());
        });
        assert_eq!(
            refusal(&c),
            ConfigError::Join(JoinConfigError::Duration {
                field: "history_ms",
                value: 0,
                min: 1
            })
        );
    }

    #[test]
    fn a_stream_join_needs_both_sides_fields_and_its_window() {
        use JoinKind::Stream;
        for field in [
            "right_key_field",
            "right_time_field",
            "before_ms",
            "after_ms",
        ] {
            let c = edited(STREAM, |o| {
                o.remove(field);
            });
            assert_eq!(
                refusal(&c),
                ConfigError::Join(JoinConfigError::Missing {
                    join: Stream,
                    field
                })
            );
        }
        let c = edited(STREAM, |o| {
            o.remove("grace_ms");
        });
        assert!(with(&c).build_processor().is_ok(), "grace defaults to 0");
        let c = edited(STREAM, |o| {
            o.insert("history_ms".into(), 5.into());
        });
        assert_eq!(
            refusal(&c),
            ConfigError::Join(JoinConfigError::NotApplicable {
                join: Stream,
                field: "history_ms"
            })
        );
        let too_long = 1u64 << 53;
        let c = edited(STREAM, |o| {
            o.insert("after_ms".into(), too_long.into());
        });
        assert_eq!(
            refusal(&c),
            ConfigError::Join(JoinConfigError::Duration {
                field: "after_ms",
                value: too_long,
                min: 0
            })
        );
    }

    #[test]
    fn both_joins_need_the_left_time_field_and_non_empty_right_fields() {
        let no_time = |processor: &str| {
            parse(&format!(r#"{{"key_field":"k","processor":{processor}}}"#))
                .build_processor()
                .err()
                .unwrap()
        };
        assert_eq!(no_time(STREAM), ConfigError::NeedsTimeField("join-stream"));
        assert_eq!(no_time(TABLE), ConfigError::NeedsTimeField("join-table"));
        for field in ["right_key_field", "right_time_field"] {
            let c = edited(STREAM, |o| {
                o.insert(field.into(), "".into());
            });
            assert_eq!(refusal(&c), ConfigError::EmptyField(field));
        }
    }
}
