// The voice page: asks the Trellis API for a thread's voice session, joins
// its LiveKit room, speaks through the microphone (or types, in text
// mode), plays the agent's voice and shows both sides of the conversation.
// Its state is kept on window.trellisVoice for those who script the page.
//
// Only the agent speaks for the flow: a data message is heeded only from a
// participant LiveKit marks as an agent (its kind comes from the token the
// agent joined with, which no caller can mint), and anyone else's is
// counted in state.ignored and dropped, so that another participant cannot
// fake a reply or the end.
import { Room, RoomEvent, Track } from 'livekit-client';

const $ = (id) => document.getElementById(id);
const state = { messages: [], status: 'idle', agent: false, everAgent: false, ended: false, session: null, ignored: 0 };
window.trellisVoice = state;

let room = null;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function setStatus(text) {
  state.status = text;
  $('status').textContent = text;
  document.body.dataset.status = text;
}

function addLine(who, text, kind) {
  state.messages.push({ who, text, kind });
  const p = document.createElement('p');
  p.className = 'msg ' + kind;
  const b = document.createElement('b');
  b.textContent = who + ': ';
  p.append(b, document.createTextNode(text));
  $('log').append(p);
  p.scrollIntoView({ block: 'end' });
}

async function askSession(thread, key, mode) {
  const res = await fetch('/v1/threads/' + encodeURIComponent(thread) + '/voice', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mode }),
  });
  const body = await res.json();
  if (!res.ok) {
    throw new Error(body.error ? body.error.code + ': ' + body.error.message : 'HTTP ' + res.status);
  }
  return body;
}

function onMessage(msg) {
  switch (msg.type) {
    case 'state':
      setStatus('agent ' + msg.state);
      break;
    case 'transcript':
      addLine('you (heard)', msg.text, 'caller');
      break;
    case 'reply':
      addLine('agent', msg.text, 'agent');
      break;
    case 'interrupted':
      addLine('agent', '(stopped: you spoke)', 'note');
      break;
    case 'notice':
    case 'error':
      addLine('note', msg.text, 'note');
      break;
    case 'end':
      state.ended = true;
      addLine('agent', msg.text || 'Goodbye.', 'agent');
      setStatus('the conversation is over');
      break;
  }
}

// An agent beats a heartbeat in this attribute; one whose beat stopped
// is a process that died, which LiveKit keeps in the room a while.
const aliveAttribute = 'trellis.alive';
const aliveFor = 8000;

function agentAlive() {
  if (!room) return false;
  for (const p of room.remoteParticipants.values()) {
    const beat = Number(p.attributes[aliveAttribute] || 0) * 1000;
    if (p.isAgent && (!beat || Date.now() - beat < aliveFor)) return true;
  }
  return false;
}

// rejoin asks for the session again when the agent left before the
// conversation ended: the API dispatches another, which carries on from
// the thread's checkpoint.
let rejoining = false;
async function rejoin() {
  if (rejoining || state.ended || !state.session) return;
  rejoining = true;
  state.everAgent = false;
  setStatus('the agent left; asking for another');
  try {
    await new Promise((r) => setTimeout(r, 1000));
    const { thread, key, mode } = state.session;
    await askSession(thread, key, mode);
  } catch (e) {
    addLine('note', 'could not ask for another agent: ' + e.message, 'note');
  } finally {
    rejoining = false;
  }
}

async function join() {
  const thread = $('thread').value.trim();
  const key = $('key').value.trim();
  const mode = $('mode').value;
  if (!thread || !key) {
    setStatus('give a thread and an API key');
    return;
  }
  $('join').disabled = true;
  setStatus('asking for a session');
  try {
    const s = await askSession(thread, key, mode);
    state.session = { thread, key, mode, topic: s.topic, room: s.room };
    room = new Room();
    room.on(RoomEvent.DataReceived, (payload, participant, kind, topic) => {
      if (topic !== s.topic) return;
      if (!participant || !participant.isAgent) {
        state.ignored++;
        return;
      }
      try {
        onMessage(JSON.parse(decoder.decode(payload)));
      } catch (e) {
        /* not ours */
      }
    });
    room.on(RoomEvent.TrackSubscribed, (track) => {
      if (track.kind === Track.Kind.Audio) {
        const el = track.attach();
        el.dataset.agent = 'voice';
        document.body.append(el);
      }
    });
    room.on(RoomEvent.TrackUnsubscribed, (track) => track.detach().forEach((el) => el.remove()));
    room.on(RoomEvent.ParticipantConnected, (p) => {
      if (p.isAgent) {
        state.agent = state.everAgent = true;
        setStatus('the agent joined');
      }
    });
    room.on(RoomEvent.ParticipantDisconnected, (p) => {
      if (p.isAgent) {
        state.agent = false;
        rejoin();
      }
    });
    room.on(RoomEvent.Disconnected, () => setStatus('disconnected'));
    setInterval(() => {
      state.agent = agentAlive();
      if (!state.agent && state.everAgent) rejoin();
    }, 2000);
    await room.connect(s.url, s.token);
    for (const p of room.remoteParticipants.values()) {
      if (p.isAgent) state.agent = state.everAgent = true;
    }
    if (mode === 'audio') {
      await room.localParticipant.setMicrophoneEnabled(true);
    }
    setStatus(state.agent ? 'the agent is here' : 'waiting for the agent');
    $('leave').disabled = false;
    document.body.dataset.joined = 'yes';
  } catch (e) {
    setStatus('could not join: ' + e.message);
    $('join').disabled = false;
  }
}

async function say(ev) {
  ev.preventDefault();
  const text = $('text').value.trim();
  if (!text || !room) return;
  $('text').value = '';
  addLine('you', text, 'caller');
  // to the agent alone: no one else in the room reads what the caller types
  const agents = [...room.remoteParticipants.values()].filter((p) => p.isAgent).map((p) => p.identity);
  await room.localParticipant.publishData(encoder.encode(JSON.stringify({ type: 'text', text })), {
    reliable: true,
    topic: state.session.topic,
    destinationIdentities: agents,
  });
}

async function leave() {
  state.ended = true;
  if (room) await room.disconnect();
  setStatus('left');
}

window.addEventListener('DOMContentLoaded', () => {
  // the fragment may carry thread, key and mode: it never reaches a server
  const params = new URLSearchParams(location.hash.slice(1));
  for (const name of ['thread', 'key', 'mode']) {
    if (params.get(name)) $(name).value = params.get(name);
  }
  $('join').addEventListener('click', join);
  $('say').addEventListener('submit', say);
  $('leave').addEventListener('click', leave);
  setStatus('ready');
  if (params.get('join') === '1') join();
});
