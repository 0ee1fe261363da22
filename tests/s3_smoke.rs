//! Smoke test of the real S3 server (tests/services/s3.sh) with aws-sdk-s3: put, get, list, and
//! the conditional PUT (`If-None-Match: *`) that checkpoint manifests rely on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use aws_sdk_s3::primitives::ByteStream;

#[tokio::test]
async fn put_get_list_and_conditional_put() {
    let settings = support::s3_settings();
    let s3 = support::s3_client(&settings);
    let prefix = support::unique_name("smoke");
    let key = format!("{prefix}/checkpoints/1.json");
    let body = br#"{"version":1}"#.to_vec();

    s3.put_object()
        .bucket(&settings.bucket)
        .key(&key)
        .body(ByteStream::from(body.clone()))
        .if_none_match("*")
        .send()
        .await
        .expect("first conditional put succeeds");

    let fetched = s3
        .get_object()
        .bucket(&settings.bucket)
        .key(&key)
        .send()
        .await
        .expect("get")
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(fetched.as_ref(), body.as_slice());

    let second = s3
        .put_object()
        .bucket(&settings.bucket)
        .key(&key)
        .body(ByteStream::from_static(b"overwrite"))
        .if_none_match("*")
        .send()
        .await;
    let error = second.expect_err("a second conditional put of the same key must be refused");
    let status = error.raw_response().map(|r| r.status().as_u16());
    assert_eq!(status, Some(412), "{error:?}");

    for name in ["a.sst", "b.sst"] {
        s3.put_object()
            .bucket(&settings.bucket)
            .key(format!("{prefix}/objects/{name}"))
            .body(ByteStream::from_static(b"sst"))
            .send()
            .await
            .expect("put");
    }
    let listed = s3
        .list_objects_v2()
        .bucket(&settings.bucket)
        .prefix(format!("{prefix}/"))
        .send()
        .await
        .expect("list");
    let mut keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            key.as_str(),
            &format!("{prefix}/objects/a.sst"),
            &format!("{prefix}/objects/b.sst")
        ]
    );

    let unchanged = s3
        .get_object()
        .bucket(&settings.bucket)
        .key(&key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(
        unchanged.as_ref(),
        body.as_slice(),
        "the refused put changed nothing"
    );
}
