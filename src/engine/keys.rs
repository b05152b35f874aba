//! Key and channel names, by the brace rule of Redisson.

/// The name as a hash tag: `{name}`, or the name itself when it already has
/// a `{`. Every key of one lock carries it, so all fall into the lock
/// name's cluster slot.
fn tagged(name: &str) -> std::borrow::Cow<'_, str> {
    if has_brace(name) {
        name.into()
    } else {
        format!("{{{name}}}").into()
    }
}

/// Whether `name` goes into keys as it is, by Redisson's brace rule: it
/// has a `{` of its own; else it goes in braces. Not Redis's hash-tag
/// rule (see [`hash_tag`]): `{open` has a brace and no tag.
fn has_brace(name: &str) -> bool {
    name.contains('{')
}

/// The owner fields (`<client-uuid>:<owner-id>`) a client made last, one
/// per slot picked by the owner id's hash: the holds an owner keeps share
/// one allocation of its field, which a million held locks would otherwise
/// each carry. A slot taken by another owner is simply overwritten.
pub(crate) struct OwnerFields {
    client: uuid::Uuid,
    slots: Box<[std::sync::Mutex<Option<std::sync::Arc<str>>>]>,
}

impl OwnerFields {
    const SLOTS: usize = 256;

    pub(crate) fn new(client: uuid::Uuid) -> OwnerFields {
        OwnerFields {
            client,
            slots: (0..Self::SLOTS).map(|_| Default::default()).collect(),
        }
    }

    /// `<client-uuid>:<owner><suffix>`, shared with earlier calls for the
    /// same owner where the slot still has it.
    pub(crate) fn field(&self, owner: &str, suffix: &str) -> std::sync::Arc<str> {
        // FNV-1a: cheap, and a poor spread only costs allocations.
        let hash = owner
            .bytes()
            .chain(suffix.bytes())
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        let slot = &self.slots[(hash % Self::SLOTS as u64) as usize];
        // Nothing panics while it is held; a poisoned slot is still sound.
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        const UUID_LEN: usize = 36;
        if let Some(field) = slot.as_ref() {
            let rest = field.get(UUID_LEN + 1..).unwrap_or("");
            if rest.len() == owner.len() + suffix.len()
                && rest.starts_with(owner)
                && rest.ends_with(suffix)
            {
                return std::sync::Arc::clone(field);
            }
        }
        let field: std::sync::Arc<str> = format!("{}:{owner}{suffix}", self.client).into();
        *slot = Some(std::sync::Arc::clone(&field));
        field
    }
}

/// `prefix:{name}` (Redisson's `prefixName`). Built by hand, in one
/// allocation: a release names its channel with it on every call.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    prefix_name_and(prefix, name, 0)
}

/// [`prefix_name`] with room for `more` bytes after it.
fn prefix_name_and(prefix: &str, name: &str, more: usize) -> String {
    let braces = !has_brace(name);
    let mut key = String::with_capacity(prefix.len() + name.len() + 3 + more);
    key.push_str(prefix);
    key.push(':');
    if braces {
        key.push('{');
    }
    key.push_str(name);
    if braces {
        key.push('}');
    }
    key
}

/// The channel a lock's unlock message goes to.
pub fn lock_channel(name: &str) -> String {
    prefix_name("redisson_lock__channel", name)
}

/// The channel where a leader election announces a new leader and a
/// resignation (ferrisson's own: Redisson has no election).
pub fn election_channel(name: &str) -> String {
    prefix_name("ferrisson_election__channel", name)
}

/// The fence of a fenced hash: the highest token that wrote it, in the
/// hash's own Cluster slot by the rule Redis applies (a key's hash tag is
/// what stands between its first `{` and the first `}` after it, when that
/// is not empty; else the whole key is hashed):
/// - a name with a hash tag: `ferrisson_fence:<name>`, the same tag;
/// - a name without one and without `}`: `ferrisson_fence:{<name>}`, the
///   whole name as the tag (a `{` in it, as in `{open`, stays in the tag);
/// - a name without a hash tag but with a `}` (`cfg{}v2`, `a}b`), which no
///   tag can hold: `ferrisson_fence_slot:{<n>}<name>`, where `<n>` is the
///   smallest decimal number in the name's slot. Its own prefix keeps it
///   apart from the fence of a name that starts with `{<n>}`.
pub fn fence(name: &str) -> String {
    in_slot_of("ferrisson_fence", name)
}

/// The last occurrence a job completed (ferrisson's own): a string
/// holding the occurrence's id, raised only, by the release that ends a
/// run of an occurrence. Named as [`fence`] is, with the prefix
/// `ferrisson_job_done` (`ferrisson_job_done:{<name>}` for most names), so
/// it is always in the job's lock's Cluster slot.
pub fn job_done(name: &str) -> String {
    in_slot_of("ferrisson_job_done", name)
}

/// `<prefix>:<name>` with a hash tag in the slot of `name` (see
/// [`fence`]): `<prefix>:<name>` for a name with a hash tag,
/// `<prefix>:{<name>}` for a name without `}`, else
/// `<prefix>_slot:{<n>}<name>`.
fn in_slot_of(prefix: &str, name: &str) -> String {
    if hash_tag(name.as_bytes()).is_some() {
        format!("{prefix}:{name}")
    } else if !name.contains('}') {
        format!("{prefix}:{{{name}}}")
    } else {
        let wanted = slot(name.as_bytes());
        // CRC16 spreads the decimal numbers over every slot: each of the
        // 16 384 is met below 110 000 (about a millisecond's search).
        let tag = (0u32..)
            .map(|n| n.to_string())
            .find(|n| slot(n.as_bytes()) == wanted)
            .unwrap_or_default();
        format!("{prefix}_slot:{{{tag}}}{name}")
    }
}

/// A key's hash tag by Redis Cluster's rule: what stands between the first
/// `{` and the first `}` after it, when that is not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// Between a candidate's label and its campaign id in a leader election's
/// owner id, `<label>~<campaign-id>`.
pub(crate) const CAMPAIGN_MARK: char = '~';

/// The length of a campaign id: a request id's 32 hex digits.
const CAMPAIGN_ID_LEN: usize = 32;

/// The label in a leader election campaign's owner id,
/// `<label>~<campaign-id>`; `None` for an owner that did not campaign.
pub fn campaign_label(owner_id: &str) -> Option<&str> {
    let (label, campaign) = owner_id.rsplit_once(CAMPAIGN_MARK)?;
    let campaign_like =
        campaign.len() == CAMPAIGN_ID_LEN && campaign.bytes().all(|b| b.is_ascii_hexdigit());
    (campaign_like && !label.is_empty()).then_some(label)
}

/// `{name}:suffix` (Redisson's `suffixName`).
fn suffix_name(name: &str, suffix: &str) -> String {
    format!("{}:{suffix}", tagged(name))
}

/// The channel of a read-write lock.
pub fn rwlock_channel(name: &str) -> String {
    prefix_name("redisson_rwlock", name)
}

/// The prefix every read-hold timeout key of a read-write lock starts
/// with, `{name}`: an owner's keys are `{name}:<field>:rwlock_timeout:<n>`.
pub(crate) fn rwlock_key_prefix(name: &str) -> String {
    tagged(name).into_owned()
}

/// One owner's read-hold timeout prefix, `{name}:<field>:rwlock_timeout`.
pub fn rwlock_timeout_prefix(name: &str, field: &str) -> String {
    suffix_name(name, &format!("{field}:rwlock_timeout"))
}

/// The fair lock's queue of waiters.
pub fn fair_queue(name: &str) -> String {
    prefix_name("redisson_lock_queue", name)
}

/// The fair lock's waiter timeouts.
pub fn fair_timeouts(name: &str) -> String {
    prefix_name("redisson_lock_timeout", name)
}

/// The fenced lock's token counter.
pub fn fencing_token(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

/// The channel of a semaphore (either kind): `redisson_sc:{name}`.
pub fn semaphore_channel(name: &str) -> String {
    prefix_name("redisson_sc", name)
}

/// The score of a permit-expirable semaphore's permit without a lease, as
/// Redisson and ferrisson write it (`Long.MAX_VALUE / 10000`): a permit
/// scored this or higher has no lease, rather than one ending in thousands
/// of years.
pub const PERMIT_NO_EXPIRY: i64 = 922_337_203_685_477;

/// The permits a permit-expirable semaphore handed out: `{name}:timeout`.
pub fn permit_timeouts(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// The channel of a count-down latch:
/// `redisson_countdownlatch__channel__{name}` (no colon, as Redisson).
///
/// Unlike every other channel, Redisson builds this one by plain
/// concatenation: the name is wrapped in braces even when it already holds a
/// `{` (`boot{eu}` gives `redisson_countdownlatch__channel__{boot{eu}}`).
/// Java and Rust waiters hear each other only on that exact name.
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// [`latch_channel`] for a client on a Redis Cluster, where the channel
/// travels in the scripts' KEYS and must share the name's slot. Redisson's
/// form does for a name without braces; for a name with its own hash tag
/// it lands in another slot, where Redisson's own calls fail (CROSSSLOT),
/// so there is no Java client to agree with and the name's tag is kept,
/// as the other channels do.
pub(crate) fn cluster_latch_channel(name: &str) -> String {
    let channel = latch_channel(name);
    if slot(channel.as_bytes()) == slot(name.as_bytes()) {
        channel
    } else {
        format!("redisson_countdownlatch__channel__{name}")
    }
}

/// The latch key that makes one release request idempotent.
pub(crate) fn unlock_latch(name: &str, request_id: &str) -> String {
    request_latch("redisson_unlock_latch", name, request_id)
}

/// The latch key of one acquire request (a lock's or a semaphore's):
/// `ferrisson_acquire_latch:{name}:<id>`, with the brace rule of Redisson's
/// latches, so it shares the object's slot. It makes a resend safe, and
/// lets a request whose replies were all lost be settled.
pub(crate) fn acquire_latch(name: &str, request_id: &str) -> String {
    request_latch("ferrisson_acquire_latch", name, request_id)
}

fn request_latch(prefix: &str, name: &str, request_id: &str) -> String {
    let mut key = prefix_name_and(prefix, name, 1 + request_id.len());
    key.push(':');
    key.push_str(request_id);
    key
}

/// What ferrisson keeps at `key`, a helper key of the object `name`: the
/// words an `Error::WrongType` about it uses.
/// `None` for any other key (the object's own, for one).
pub(crate) fn kept_at(name: &str, key: &str) -> Option<&'static str> {
    if key == name {
        None
    } else if key == fencing_token(name) {
        Some("fencing token counter")
    } else if key == fair_queue(name) {
        Some("fair lock queue")
    } else if key == fair_timeouts(name) {
        Some("fair lock waiter deadlines")
    } else if key == permit_timeouts(name) {
        Some("set of permits out")
    } else if key == fence(name) {
        Some("fence of a fenced hash")
    } else if key == job_done(name) {
        Some("job's last occurrence done")
    } else {
        None
    }
}

/// Whether one field of a hash, with its value, belongs in a lock's hash
/// (Redisson's layout): a read-write lock's `mode`, or an owner field,
/// `<client>:<owner>` (a colon in it), holding a count (decimal digits).
/// A hash with any other field is someone else's data, which no lock call
/// touches. The scripts apply the same rule (`lua/README.md`, "refuse
/// what is no lock"); the inspector too.
pub fn is_lock_hold(field: &str, value: &str) -> bool {
    field == "mode" || (field.contains(':') && is_digits(value))
}

/// Whether a string is a semaphore's or a latch's count, or a fencing
/// token counter: a decimal integer, perhaps negative. The scripts apply
/// the same rule ("read a count"); the inspector too.
pub fn is_count(value: &str) -> bool {
    is_digits(value.strip_prefix('-').unwrap_or(value))
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
/// (the text between the first `{` and the next `}`, when not empty), or of
/// the whole key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = hash_tag(key).unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_in_its_hashs_slot_whatever_the_name() {
        for name in [
            "cfg",
            "cfg{}v2",
            "{open",
            "open}",
            "a}b",
            "}{",
            "{}",
            "{",
            "}",
            "x{y}z",
            "{a}}",
            "{{a}",
            "billing:state",
            "{elect}:4:state",
            "ü{}",
        ] {
            let key = fence(name);
            assert_eq!(
                slot(key.as_bytes()),
                slot(name.as_bytes()),
                "{name} -> {key}"
            );
            let done = job_done(name);
            assert_eq!(
                slot(done.as_bytes()),
                slot(name.as_bytes()),
                "{name} -> {done}"
            );
            assert!(
                key.ends_with(name) || key.ends_with(&format!("{name}}}")),
                "{key}"
            );
        }
        // The names that were fenced in their slot before keep their fence.
        assert_eq!(fence("cfg"), "ferrisson_fence:{cfg}");
        assert_eq!(fence("{elect}:4"), "ferrisson_fence:{elect}:4");
        assert_eq!(fence("{open"), "ferrisson_fence:{{open}");
        assert_eq!(job_done("cfg"), "ferrisson_job_done:{cfg}");
        // No two names share a fence.
        assert_ne!(
            fence("a}b"),
            fence(&fence("a}b")["ferrisson_fence_slot:".len()..])
        );
    }

    #[test]
    fn lock_holds_and_counts_are_told_from_other_data() {
        assert!(is_lock_hold("mode", "read"));
        assert!(is_lock_hold("0b3c-uuid:task-7", "2"));
        assert!(is_lock_hold("0b3c-uuid:task-7:write", "1"));
        assert!(!is_lock_hold("name", "bob"));
        assert!(!is_lock_hold("name", "3"));
        assert!(!is_lock_hold("a:b", "bob"));
        assert!(!is_lock_hold("a:b", ""));
        assert!(!is_lock_hold("a:b", "-1"));
        assert!(!is_lock_hold("a:b", "+1"));
        assert!(is_count("0") && is_count("42") && is_count("-3"));
        assert!(!is_count("") && !is_count("-") && !is_count("4.5"));
        assert!(!is_count("+4") && !is_count(" 4") && !is_count("token-9f2c"));
        assert_eq!(kept_at("a", "a"), None);
        assert_eq!(
            kept_at("a", "redisson_lock_token:{a}"),
            Some("fencing token counter")
        );
        assert_eq!(
            kept_at("a", "redisson_lock_queue:{a}"),
            Some("fair lock queue")
        );
        assert_eq!(kept_at("a", "{a}:timeout"), Some("set of permits out"));
        assert_eq!(kept_at("a", "b"), None);
    }

    #[test]
    fn slots_follow_the_cluster_spec() {
        // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        // Every key of a lock is in its name's slot.
        let name = "orders:42";
        for key in [
            lock_channel(name),
            unlock_latch(name, "ab"),
            fair_queue(name),
            fencing_token(name),
            rwlock_timeout_prefix(name, "x:1") + ":1",
            semaphore_channel(name),
            permit_timeouts(name),
            latch_channel(name),
            acquire_latch(name, "ff"),
        ] {
            assert_eq!(slot(key.as_bytes()), slot(b"orders:42"), "{key}");
        }
    }

    #[test]
    fn plain_names_get_braces() {
        assert_eq!(
            lock_channel("orders:42"),
            "redisson_lock__channel:{orders:42}"
        );
        assert_eq!(
            unlock_latch("orders:42", "ab12"),
            "redisson_unlock_latch:{orders:42}:ab12"
        );
        assert_eq!(
            fencing_token("orders:42"),
            "redisson_lock_token:{orders:42}"
        );
        assert_eq!(semaphore_channel("jobs"), "redisson_sc:{jobs}");
        assert_eq!(permit_timeouts("jobs"), "{jobs}:timeout");
        assert_eq!(
            latch_channel("boot"),
            "redisson_countdownlatch__channel__{boot}"
        );
    }

    #[test]
    fn names_with_a_tag_keep_theirs() {
        assert_eq!(lock_channel("{user}:7"), "redisson_lock__channel:{user}:7");
        assert_eq!(rwlock_key_prefix("{user}:7"), "{user}:7");
        assert_eq!(
            rwlock_timeout_prefix("{user}:7", "u:1"),
            "{user}:7:u:1:rwlock_timeout"
        );
        assert_eq!(
            unlock_latch("a{b}c", "ff"),
            "redisson_unlock_latch:a{b}c:ff"
        );
        assert_eq!(permit_timeouts("{jobs}:1"), "{jobs}:1:timeout");
        // Redisson wraps the latch's name in braces whatever it holds.
        assert_eq!(
            latch_channel("{boot}:1"),
            "redisson_countdownlatch__channel__{{boot}:1}"
        );
        assert_eq!(
            latch_channel("boot{eu}"),
            "redisson_countdownlatch__channel__{boot{eu}}"
        );
        // On a cluster, only where Redisson's form shares the name's slot.
        assert_eq!(
            cluster_latch_channel("boot"),
            "redisson_countdownlatch__channel__{boot}"
        );
        assert_eq!(
            cluster_latch_channel("{boot}:1"),
            "redisson_countdownlatch__channel__{boot}:1"
        );
    }

    #[test]
    fn owner_fields_are_shared_per_owner_and_never_mixed_up() {
        let id = uuid::Uuid::new_v4();
        let fields = OwnerFields::new(id);
        let one = fields.field("task-1", "");
        assert_eq!(&*one, format!("{id}:task-1"));
        // The same owner gets the same allocation back.
        assert!(std::sync::Arc::ptr_eq(&one, &fields.field("task-1", "")));
        // Owners that share a prefix, or differ only by the suffix, never
        // get each other's field, whichever slot they land in.
        for owner in ["task-12", "task-", "task-1:x", "thread-1"] {
            assert_eq!(&*fields.field(owner, ""), format!("{id}:{owner}"));
        }
        assert_eq!(
            &*fields.field("task-1", ":write"),
            format!("{id}:task-1:write")
        );
        assert_eq!(&*fields.field("task-1", ""), format!("{id}:task-1"));
        // More owners than slots: each still gets its own field.
        for n in 0..2_000 {
            let owner = format!("task-{n}");
            assert_eq!(&*fields.field(&owner, ""), format!("{id}:{owner}"));
        }
    }
}
