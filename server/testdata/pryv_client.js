// Pryv's JavaScript client (npm package pryv) against Silo: the calls a high-frequency app makes.
// Run by TestSeriesPryvClient with the API endpoint http://{token}@{host}/{username}/ as argument.
const pryv = require('pryv');

(async () => {
  const conn = new pryv.Connection(process.argv[2]);
  const info = await conn.accessInfo();
  const streams = await conn.api([{ method: 'streams.create', params: { id: 'hf', name: 'HF' } }]);
  if (streams[0].error) throw new Error(JSON.stringify(streams[0].error));
  const created = await conn.post('events', { streamIds: ['hf'], type: 'series:mass/kg', time: 1000 });
  const id = created.event.id;
  await conn.addPointsToHFEvent(id, ['deltaTime', 'value'], [[0, 70.5], [1, 70.25], [2.5, 70]]);
  const read = await conn.get('events/' + id + '/series', { fromDeltaTime: 1 });
  console.log(JSON.stringify({ user: info.user.username, fields: read.fields, points: read.points, hasMeta: read.meta.serverTime > 0 }));
})().catch((err) => { console.error(err); process.exit(1); });
