//! What a connection sends: retransmissions first, then new data (paced,
//! within the window, small packets held while one is in flight), then its
//! FIN, then a pure acknowledgement if one is due.

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::{Conn, State};
use crate::packet::{self, HEADER_LEN, Header, MAX_SACK_LEN, PacketType};
use crate::send::{Kind, Sent};
use crate::seq;

impl Conn {
    pub(super) fn ts_header(&self, ptype: PacketType, seq: u16, ts: u32) -> Header {
        Header {
            ptype,
            conn_id: if ptype == PacketType::Syn {
                self.recv_id
            } else {
                self.send_id
            },
            timestamp_us: ts,
            timestamp_diff_us: self.reply_micro,
            wnd_size: u32::try_from(self.recv.free()).unwrap_or(u32::MAX),
            seq_nr: seq,
            ack_nr: if ptype == PacketType::Syn {
                0
            } else {
                self.ack_nr
            },
        }
    }

    /// Records that a packet carrying our current ack went out.
    pub(super) fn acked_sent(&mut self, with_sack: bool) {
        if self.recv.held() == 0 || with_sack {
            self.ack_now = false;
            self.ack_at = None;
            self.unacked = 0;
        }
        self.last_wnd = self.recv.free();
    }

    /// A RESET toward the peer for this connection.
    pub(crate) fn reset_packet(&self, ts: u32) -> Bytes {
        let h = self.ts_header(PacketType::Reset, self.seq_nr, ts);
        let mut b = BytesMut::with_capacity(HEADER_LEN);
        packet::encode(&h, None, 0, &[], &mut b);
        b.freeze()
    }

    /// Whether `poll_transmit` might produce something now.
    pub(crate) fn wants_tx(&self, now: Instant) -> bool {
        if self.state == State::Closed {
            return self.ack_now;
        }
        !self.resend.is_empty()
            || self.ack_now
            || self.ack_at.is_some_and(|t| t <= now)
            || (self.send.next_len().is_some() && self.state != State::SynSent)
            || (self.close_requested && self.fin_seq.is_none() && self.state == State::Connected)
    }

    pub(super) fn arm_rto(&mut self, now: Instant) {
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rtt.rto());
        }
    }

    /// The next datagram to send, if any.
    pub(crate) fn poll_transmit(&mut self, now: Instant, ts: u32) -> Option<Bytes> {
        if self.state == State::Closed {
            if self.ack_now {
                return Some(self.state_packet(ts));
            }
            return None;
        }
        if let Some(d) = self.poll_resend(now, ts) {
            return Some(d);
        }
        if self.state != State::SynSent {
            if let Some(d) = self.poll_data(now, ts) {
                return Some(d);
            }
            if let Some(d) = self.poll_fin(now, ts) {
                return Some(d);
            }
        }
        if self.ack_now || self.ack_at.is_some_and(|t| t <= now) {
            return Some(self.state_packet(ts));
        }
        None
    }

    pub(super) fn state_packet(&mut self, ts: u32) -> Bytes {
        let h = self.ts_header(PacketType::State, self.seq_nr, ts);
        let mut mask = [0u8; MAX_SACK_LEN];
        let n = self.recv.sack(&mut mask);
        let mut b = BytesMut::with_capacity(HEADER_LEN + 2 + MAX_SACK_LEN);
        packet::encode(&h, (n > 0).then(|| &mask[..n]), 0, &[], &mut b);
        self.acked_sent(true);
        self.stats.acks_sent += 1;
        b.freeze()
    }

    pub(super) fn poll_resend(&mut self, now: Instant, ts: u32) -> Option<Bytes> {
        while let Some(&seq) = self.resend.front() {
            let i = usize::from(seq::dist(self.una, seq));
            let Some(s) = self.send.inflight.get(i) else {
                self.resend.pop_front();
                continue;
            };
            if !s.lost || s.sacked {
                self.resend.pop_front();
                continue;
            }
            let head = i == 0;
            let len = s.len;
            if !head {
                if !self.window_allows(len) {
                    self.cwnd_limited = true;
                    return None;
                }
                if self.cfg.pacing
                    && let Some(at) = self.pacer.wait(now)
                {
                    self.pace_at = Some(at);
                    return None;
                }
            }
            self.resend.pop_front();
            let kind = s.kind;
            let ptype = match kind {
                Kind::Syn => PacketType::Syn,
                Kind::Data => PacketType::Data,
                Kind::Fin => PacketType::Fin,
            };
            let h = self.ts_header(ptype, seq, ts);
            let s = &mut self.send.inflight[i];
            let mut b = BytesMut::with_capacity(HEADER_LEN + s.payload.len());
            packet::encode(&h, None, 0, &s.payload, &mut b);
            if s.transmissions > 0 {
                self.stats.packets_retransmitted += 1;
                self.stats.bytes_retransmitted += len as u64;
            }
            s.lost = false;
            s.transmissions += 1;
            s.sent_at = now;
            self.bytes_in_flight += len;
            self.pacer.sent(b.len(), now);
            self.stats.packets_sent += 1;
            if kind != Kind::Syn {
                self.acked_sent(false);
            }
            self.arm_rto(now);
            return Some(b.freeze());
        }
        None
    }

    pub(super) fn poll_data(&mut self, now: Instant, ts: u32) -> Option<Bytes> {
        let len = self.send.next_len()?;
        let partial = !self.send.next_full();
        if partial && !self.close_requested && self.partial_inflight.is_some() {
            return None;
        }
        let forced = self.force_one && self.bytes_in_flight == 0;
        if !self.window_allows(len) && !forced {
            self.cwnd_limited = true;
            if self.bytes_in_flight == 0 {
                // Peer window closed: probe it on the retransmission timer.
                self.arm_rto(now);
            }
            return None;
        }
        if self.cfg.pacing
            && let Some(at) = self.pacer.wait(now)
        {
            self.pace_at = Some(at);
            return None;
        }
        self.force_one = false;
        self.pace_at = None;
        let seq = self.seq_nr;
        self.seq_nr = seq.wrapping_add(1);
        let mut buf = self.send.take_unsent()?;
        let probe_to = (self.mtu.searching()
            && self.state == State::Connected
            && !partial
            && len == self.payload_max()
            && self.cc.window() > 3 * self.mtu.floor
            && self.send.unsent_bytes() >= 2 * len
            && seq != 0)
            .then(|| self.mtu.next_probe());
        let h = self.ts_header(PacketType::Data, seq, ts);
        let (datagram, payload) = match probe_to {
            None => {
                packet::write_header(&h, 0, &mut buf[..HEADER_LEN]);
                let d = buf.freeze();
                let p = d.slice(HEADER_LEN..);
                (d, p)
            }
            Some(size) => {
                let payload = buf.freeze().slice(HEADER_LEN..);
                let pad = size - HEADER_LEN - payload.len();
                let mut b = BytesMut::with_capacity(size);
                packet::encode(&h, None, pad, &payload, &mut b);
                self.mtu.probe = Some((seq, b.len()));
                self.stats.mtu_probes += 1;
                (b.freeze(), payload)
            }
        };
        if partial {
            self.partial_inflight = Some(seq);
        }
        self.send.push_inflight(Sent {
            kind: Kind::Data,
            payload,
            len,
            sent_at: now,
            transmissions: 1,
            sacked: false,
            lost: false,
            probe: probe_to.is_some(),
        });
        self.bytes_in_flight += len;
        self.pacer.sent(datagram.len(), now);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        self.acked_sent(false);
        self.arm_rto(now);
        Some(datagram)
    }

    pub(super) fn poll_fin(&mut self, now: Instant, ts: u32) -> Option<Bytes> {
        if !self.close_requested
            || self.fin_seq.is_some()
            || self.send.unsent_bytes() > 0
            || self.state != State::Connected
        {
            return None;
        }
        let seq = self.seq_nr;
        self.seq_nr = seq.wrapping_add(1);
        self.fin_seq = Some(seq);
        let h = self.ts_header(PacketType::Fin, seq, ts);
        let mut b = BytesMut::with_capacity(HEADER_LEN);
        packet::encode(&h, None, 0, &[], &mut b);
        self.send.push_inflight(Sent {
            kind: Kind::Fin,
            payload: Bytes::new(),
            len: 0,
            sent_at: now,
            transmissions: 1,
            sacked: false,
            lost: false,
            probe: false,
        });
        self.stats.packets_sent += 1;
        self.acked_sent(false);
        self.arm_rto(now);
        Some(b.freeze())
    }
}
