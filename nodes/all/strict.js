// Compiles the flow-format schema with Ajv (draft 2020-12) in strict mode
// and validates documents with it: argv[2] is the schema, stdin a JSON
// list of {name, doc}; stdout a JSON list of {name, valid, errors}.
const fs = require('fs');
const Ajv2020 = require(process.env.AJV_DIR + '/dist/2020').default;
const ajv = new Ajv2020({ strict: true, allErrors: true });
const validate = ajv.compile(JSON.parse(fs.readFileSync(process.argv[2], 'utf8')));
const docs = JSON.parse(fs.readFileSync(0, 'utf8'));
const out = docs.map(({ name, doc }) => {
  const valid = validate(doc);
  return { name, valid, errors: valid ? [] : validate.errors.map(e => e.instancePath + ' ' + e.message) };
});
process.stdout.write(JSON.stringify(out));
