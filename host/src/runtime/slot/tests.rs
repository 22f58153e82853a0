use super::canary_selected;

#[test]
fn a_canary_gets_exactly_its_share_of_every_hundred_calls() {
    for percent in [1u8, 5, 10, 33, 50, 99, 100] {
        for start in [0u64, 100, 12_300] {
            let chosen = (start..start + 100)
                .filter(|&s| canary_selected(s, percent))
                .count();
            assert_eq!(chosen, usize::from(percent), "{percent}% from {start}");
        }
    }
    assert!(!(0..1000).any(|s| canary_selected(s, 0)));
}
