//! Outputs recorded from real etcdctl 3.4.23 (Debian bookworm) and 3.5.16 (Debian trixie)
//! against real servers on loopback.
use super::*;

const LIST_34_AFTER_ADD: &str = r#"{"header":{"cluster_id":4194641949231201594,"member_id":4882207455511630925,"raft_term":2},"members":[{"ID":4882207455511630925,"name":"n1","peerURLs":["http://127.0.0.1:23424"],"clientURLs":["http://127.0.0.1:23423"]},{"ID":14558793197533603461,"peerURLs":["http://127.0.0.1:29999"],"isLearner":true}]}"#;
const ADD_35: &str = r#"{"header":{"cluster_id":11931292582570105337,"member_id":2669156212950936917,"raft_term":2},"member":{"ID":5003946193484327858,"peerURLs":["http://127.0.0.1:29999"],"isLearner":true},"members":[{"ID":2669156212950936917,"name":"n1","peerURLs":["http://127.0.0.1:23517"],"clientURLs":["http://127.0.0.1:23516"]},{"ID":5003946193484327858,"peerURLs":["http://127.0.0.1:29999"],"isLearner":true}]}"#;
const STATUS_34_NOSPACE: &str = r#"[{"Endpoint":"http://127.0.0.1:24423","Status":{"header":{"cluster_id":9379791074929509996,"member_id":579077925842008352,"revision":15,"raft_term":2},"version":"3.4.23","dbSize":1486848,"leader":579077925842008352,"raftIndex":21,"raftTerm":2,"raftAppliedIndex":21,"errors":["memberID:579077925842008352 alarm:NOSPACE "],"dbSizeInUse":1409024}}]"#;
const STATUS_35: &str = r#"[{"Endpoint":"http://127.0.0.1:23516","Status":{"header":{"cluster_id":11931292582570105337,"member_id":2669156212950936917,"revision":1,"raft_term":2},"version":"3.5.16","dbSize":20480,"leader":2669156212950936917,"raftIndex":4,"raftTerm":2,"raftAppliedIndex":4,"dbSizeInUse":16384}}]"#;
const HEALTH_WITH_ONE_DOWN_35: &str = r#"[{"endpoint":"http://127.0.0.1:24516","health":true,"took":"2.409265ms"},{"endpoint":"http://127.0.0.1:1","health":false,"took":"5.002920628s","error":"context deadline exceeded"}]"#;
const ALARMS_34_EMPTY: &str = "{}";
const ALARMS_35_EMPTY: &str = r#"{"header":{"cluster_id":11931292582570105337,"member_id":2669156212950936917,"revision":1,"raft_term":2}}"#;
const ALARMS_34_NOSPACE: &str = r#"{"alarms":[{"memberID":579077925842008352,"alarm":1}]}"#;
const ALARMS_35_NOSPACE: &str = r#"{"header":{"cluster_id":3202955660892757770,"member_id":5884649830101004842,"revision":17,"raft_term":2},"alarms":[{"memberID":5884649830101004842,"alarm":1}]}"#;
const GET_34: &str = r#"{"header":{"cluster_id":4194641949231201594,"member_id":4882207455511630925,"revision":2,"raft_term":2},"kvs":[{"key":"YQ==","create_revision":2,"mod_revision":2,"version":1,"value":"Yg=="}],"count":1}"#;

#[test]
fn member_list_of_3_4_keeps_a_never_started_learner_and_exact_u64_ids() {
    let list = member_list(LIST_34_AFTER_ADD.as_bytes()).unwrap();
    assert_eq!(list.header.cluster_id, Id(4194641949231201594));
    assert_eq!(list.members.len(), 2);
    let learner = list.get(Id(14558793197533603461)).unwrap();
    // Above i64::MAX: read exactly, not through f64.
    assert_eq!(learner.id.0, 14558793197533603461);
    assert_eq!(learner.id.to_string(), "ca0b3947015d2685");
    assert!(learner.is_learner);
    assert!(!learner.is_started());
    assert_eq!(
        list.initial_cluster_for(Id(1), "x"),
        "n1=http://127.0.0.1:23424,=http://127.0.0.1:29999",
        "as etcdctl prints it"
    );
    assert!(learner.client_urls.is_empty());
    let voter = list.by_peer_url("http://127.0.0.1:23424").unwrap();
    assert!(voter.is_started() && !voter.is_learner);
    assert_eq!(list.voters().count(), 1);
}

#[test]
fn member_add_of_3_5_gives_the_new_id_and_the_initial_cluster_to_start_with() {
    let a = added(ADD_35.as_bytes()).unwrap();
    assert_eq!(a.member.id, Id(5003946193484327858));
    assert!(a.member.is_learner);
    assert_eq!(
        a.list().initial_cluster_for(a.member.id, "n2"),
        "n1=http://127.0.0.1:23517,n2=http://127.0.0.1:29999"
    );
}

#[test]
fn endpoint_status_of_3_4_and_3_5_with_sizes_leader_and_alarm_errors() {
    let s = &endpoint_status(STATUS_34_NOSPACE.as_bytes()).unwrap()[0];
    assert_eq!(s.version, "3.4.23");
    assert_eq!(s.db_size, 1486848);
    assert_eq!(s.db_size_in_use, Some(1409024));
    assert_eq!(s.leader, s.member_id);
    assert_eq!(s.raft_index, 21);
    assert_eq!(
        s.errors,
        vec!["memberID:579077925842008352 alarm:NOSPACE ".to_string()]
    );
    assert!(!s.is_learner);
    let s = &endpoint_status(STATUS_35.as_bytes()).unwrap()[0];
    assert_eq!(s.endpoint, "http://127.0.0.1:23516");
    assert_eq!(s.cluster_id, Id(11931292582570105337));
    assert_eq!(s.raft_applied_index, Some(4));
    assert!(s.errors.is_empty());
}

#[test]
fn endpoint_status_without_db_size_in_use_reads_as_unknown() {
    // Older servers leave dbSizeInUse out; the field is then unknown, not zero.
    let text = STATUS_35.replace(r#","dbSizeInUse":16384"#, "");
    let s = &endpoint_status(text.as_bytes()).unwrap()[0];
    assert_eq!(s.db_size_in_use, None);
}

#[test]
fn endpoint_health_keeps_the_unreachable_endpoints_error() {
    let h = endpoint_health(HEALTH_WITH_ONE_DOWN_35.as_bytes()).unwrap();
    assert!(h[0].healthy);
    assert!(!h[1].healthy);
    assert_eq!(h[1].error.as_deref(), Some("context deadline exceeded"));
}

#[test]
fn alarm_lists_of_3_4_and_3_5_empty_and_with_nospace() {
    assert!(alarms(ALARMS_34_EMPTY.as_bytes()).unwrap().is_empty());
    assert!(alarms(ALARMS_35_EMPTY.as_bytes()).unwrap().is_empty());
    for text in [ALARMS_34_NOSPACE, ALARMS_35_NOSPACE] {
        let a = alarms(text.as_bytes()).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].kind, AlarmKind::NoSpace);
        assert_eq!(a[0].kind.as_str(), "NOSPACE");
    }
}

#[test]
fn get_answers_decode_base64_keys_and_values() {
    let kvs = get(GET_34.as_bytes()).unwrap();
    assert_eq!(kvs[0].key, b"a");
    assert_eq!(kvs[0].value, b"b");
    assert_eq!(kvs[0].mod_revision, 2);
}

#[test]
fn base64_of_every_padding() {
    assert_eq!(base64_decode("").unwrap(), b"");
    assert_eq!(base64_decode("YQ==").unwrap(), b"a");
    assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
    assert_eq!(base64_decode("YWJj").unwrap(), b"abc");
    assert!(base64_decode("YQ=").is_none());
    assert!(base64_decode("Y$==").is_none());
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    assert!(member_list(b"Error: something").is_err());
    assert!(endpoint_status(b"{").is_err());
}

#[test]
fn an_initial_member_that_never_started_has_its_name_but_no_client_url() {
    // 3.5.16, a new three-member cluster of which two started.
    let text = r#"{"header":{"cluster_id":1954493566479541435,"member_id":16333665140742200556,"raft_term":2},"members":[{"ID":3660125263232131921,"name":"b","peerURLs":["http://127.0.0.1:26011"],"clientURLs":["http://127.0.0.1:26010"]},{"ID":5037047406486088940,"name":"c","peerURLs":["http://127.0.0.1:26021"]},{"ID":16333665140742200556,"name":"a","peerURLs":["http://127.0.0.1:26001"],"clientURLs":["http://127.0.0.1:26000"]}]}"#;
    let list = member_list(text.as_bytes()).unwrap();
    let c = list.by_peer_url("http://127.0.0.1:26021").unwrap();
    assert_eq!(c.name, "c");
    assert!(!c.is_started());
    assert_eq!(list.members.iter().filter(|m| m.is_started()).count(), 2);
}

#[test]
fn endpoint_status_of_a_member_without_leader_says_so() {
    // 3.5.16, one of three members left: it still answers status, serializably.
    let text = r#"[{"Endpoint":"http://127.0.0.1:26000","Status":{"header":{"cluster_id":1954493566479541435,"member_id":16333665140742200556,"revision":1,"raft_term":2},"version":"3.5.16","dbSize":20480,"raftIndex":7,"raftTerm":2,"raftAppliedIndex":7,"errors":["etcdserver: no leader"],"dbSizeInUse":16384}}]"#;
    let s = &endpoint_status(text.as_bytes()).unwrap()[0];
    assert_eq!(s.leader, Id(0));
    assert_eq!(s.errors, ["etcdserver: no leader"]);
}

// The same member asked through etcdctl `-w json` and the JSON gateway (`curl -0 -X POST`),
// one after the other: 3.4.23 and 3.5.16 on loopback, under NOSPACE.
const GW_LIST_34: &str = r#"{"header":{"cluster_id":"6001611773266757492","member_id":"13049071153751544597","raft_term":"2"},"members":[{"ID":"13049071153751544597","name":"n1","peerURLs":["http://127.0.0.1:24380"],"clientURLs":["http://127.0.0.1:24379"]}]}"#;
const CTL_LIST_34: &str = r#"{"header":{"cluster_id":6001611773266757492,"member_id":13049071153751544597,"raft_term":2},"members":[{"ID":13049071153751544597,"name":"n1","peerURLs":["http://127.0.0.1:24380"],"clientURLs":["http://127.0.0.1:24379"]}]}"#;
const GW_LIST_35: &str = r#"{"header":{"cluster_id":"2375181864447732657", "member_id":"9368506742490709939", "raft_term":"2"}, "members":[{"ID":"9368506742490709939", "name":"n1", "peerURLs":["http://127.0.0.1:25380"], "clientURLs":["http://127.0.0.1:25379"]}]}"#;
const CTL_LIST_35: &str = r#"{"header":{"cluster_id":2375181864447732657,"member_id":9368506742490709939,"raft_term":2},"members":[{"ID":9368506742490709939,"name":"n1","peerURLs":["http://127.0.0.1:25380"],"clientURLs":["http://127.0.0.1:25379"]}]}"#;
const GW_STATUS_34: &str = r#"{"header":{"cluster_id":"6001611773266757492","member_id":"13049071153751544597","revision":"19","raft_term":"2"},"version":"3.4.23","dbSize":"1830912","leader":"13049071153751544597","raftIndex":"27","raftTerm":"2","raftAppliedIndex":"27","errors":["memberID:13049071153751544597 alarm:NOSPACE "],"dbSizeInUse":"1822720"}"#;
const CTL_STATUS_34: &str = r#"[{"Endpoint":"http://127.0.0.1:24379","Status":{"header":{"cluster_id":6001611773266757492,"member_id":13049071153751544597,"revision":19,"raft_term":2},"version":"3.4.23","dbSize":1830912,"leader":13049071153751544597,"raftIndex":27,"raftTerm":2,"raftAppliedIndex":27,"errors":["memberID:13049071153751544597 alarm:NOSPACE "],"dbSizeInUse":1822720}}]"#;
const GW_STATUS_35: &str = r#"{"header":{"cluster_id":"2375181864447732657", "member_id":"9368506742490709939", "revision":"21", "raft_term":"2"}, "version":"3.5.16", "dbSize":"2031616", "leader":"9368506742490709939", "raftIndex":"30", "raftTerm":"2", "raftAppliedIndex":"30", "errors":["memberID:9368506742490709939 alarm:NOSPACE "], "dbSizeInUse":"2023424"}"#;
const CTL_STATUS_35: &str = r#"[{"Endpoint":"http://127.0.0.1:25379","Status":{"header":{"cluster_id":2375181864447732657,"member_id":9368506742490709939,"revision":21,"raft_term":2},"version":"3.5.16","dbSize":2031616,"leader":9368506742490709939,"raftIndex":30,"raftTerm":2,"raftAppliedIndex":30,"errors":["memberID:9368506742490709939 alarm:NOSPACE "],"dbSizeInUse":2023424}}]"#;
const GW_ALARMS_34_EMPTY: &str = "{}";
const GW_ALARMS_35_EMPTY: &str = r#"{"header":{"cluster_id":"2375181864447732657", "member_id":"9368506742490709939", "revision":"1", "raft_term":"2"}}"#;
const GW_ALARMS_34: &str = r#"{"alarms":[{"memberID":"13049071153751544597","alarm":"NOSPACE"}]}"#;
const CTL_ALARMS_34: &str = r#"{"alarms":[{"memberID":13049071153751544597,"alarm":1}]}"#;
const GW_ALARMS_35: &str = r#"{"header":{"cluster_id":"2375181864447732657", "member_id":"9368506742490709939", "revision":"21", "raft_term":"2"}, "alarms":[{"memberID":"9368506742490709939", "alarm":"NOSPACE"}]}"#;
const CTL_ALARMS_35: &str = r#"{"header":{"cluster_id":2375181864447732657,"member_id":9368506742490709939,"revision":21,"raft_term":2},"alarms":[{"memberID":9368506742490709939,"alarm":1}]}"#;

#[test]
fn the_gateways_member_lists_read_as_etcdctls_with_exact_ids() {
    for (gw, ctl) in [(GW_LIST_34, CTL_LIST_34), (GW_LIST_35, CTL_LIST_35)] {
        let list = member_list(gw.as_bytes()).unwrap();
        assert_eq!(list, member_list(ctl.as_bytes()).unwrap());
        assert_eq!(list.members.len(), 1);
        assert_eq!(list.members[0].name, "n1");
    }
    // Above i64::MAX, from a string: read exactly.
    let list = member_list(GW_LIST_34.as_bytes()).unwrap();
    assert_eq!(list.members[0].id, Id(13049071153751544597));
    assert_eq!(list.header.cluster_id, Id(6001611773266757492));
}

#[test]
fn the_gateways_statuses_read_as_etcdctls_with_sizes_leader_and_alarms() {
    for (gw, ctl, url) in [
        (GW_STATUS_34, CTL_STATUS_34, "http://127.0.0.1:24379"),
        (GW_STATUS_35, CTL_STATUS_35, "http://127.0.0.1:25379"),
    ] {
        let s = status(url, gw.as_bytes()).unwrap();
        assert_eq!(s, endpoint_status(ctl.as_bytes()).unwrap()[0]);
        assert_eq!(s.leader, s.member_id);
        assert!(s.errors[0].contains("alarm:NOSPACE"), "{s:?}");
        assert!(s.db_size_in_use.is_some() && s.raft_applied_index.is_some());
    }
    let s = status("http://127.0.0.1:25379", GW_STATUS_35.as_bytes()).unwrap();
    assert_eq!(s.db_size, 2031616);
    assert_eq!(s.db_size_in_use, Some(2023424));
    assert_eq!(s.revision, 21);
    assert_eq!(s.version, "3.5.16");
    // Left out at zero: no leader is Id(0), an absent size in use is unknown.
    let s = status(
        "http://127.0.0.1:25379",
        GW_STATUS_35
            .replace(r#""leader":"9368506742490709939", "#, "")
            .replace(r#", "dbSizeInUse":"2023424""#, "")
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(s.leader, Id(0));
    assert_eq!(s.db_size_in_use, None);
}

#[test]
fn the_gateways_alarms_by_name_read_as_etcdctls_by_number() {
    assert!(alarms(GW_ALARMS_34_EMPTY.as_bytes()).unwrap().is_empty());
    assert!(alarms(GW_ALARMS_35_EMPTY.as_bytes()).unwrap().is_empty());
    for (gw, ctl) in [(GW_ALARMS_34, CTL_ALARMS_34), (GW_ALARMS_35, CTL_ALARMS_35)] {
        let a = alarms(gw.as_bytes()).unwrap();
        assert_eq!(a, alarms(ctl.as_bytes()).unwrap());
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].kind, AlarmKind::NoSpace);
    }
    let corrupt = GW_ALARMS_35.replace("NOSPACE", "CORRUPT");
    assert_eq!(
        alarms(corrupt.as_bytes()).unwrap()[0].kind,
        AlarmKind::Corrupt
    );
}

#[test]
fn an_integer_string_that_is_no_integer_is_an_error() {
    let bad = GW_STATUS_35.replace(r#""dbSize":"2031616""#, r#""dbSize":"2 MiB""#);
    let e = status("http://127.0.0.1:25379", bad.as_bytes()).unwrap_err();
    assert!(!e.is_empty());
    assert!(member_list(br#"{"header":{"cluster_id":"-1","member_id":"1"}}"#).is_err());
}
