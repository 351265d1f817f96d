//! What the generator writes for the answers of an operation: a result from every success
//! response, an enum for an answer of several forms (tagged or untagged, and a comment
//! saying which), and a `choose` for a 404 a read's document
//! describes as an answer.

use sallyport_openapi::OpenApi;
use sallyport_scaffold::{Decision, Generated, Scaffold};

const PETS: &str = r##"
openapi: 3.1.0
info: {title: Pets, version: "1"}
paths:
  /pets/{id}:
    get:
      operationId: getPet
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "200":
          description: the pet
          content:
            application/json:
              schema:
                oneOf:
                  - $ref: "#/components/schemas/Cat"
                  - $ref: "#/components/schemas/Dog"
                discriminator:
                  propertyName: kind
                  mapping: {feline: "#/components/schemas/Cat"}
        "404":
          description: Resource not found
    delete:
      operationId: deletePet
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "404":
          description: Not Found if the pet was already adopted
        "204":
          description: gone
  /pets/{id}/adopted:
    get:
      operationId: isAdopted
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "204": {description: adopted}
        "404": {description: Not Found if the pet has not been adopted}
  /pets/{id}/shape:
    get:
      operationId: petShape
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "200":
          description: either shape
          content:
            application/json:
              schema:
                anyOf:
                  - {type: object, required: [name, size], properties: {name: {type: string}, size: {type: integer}, tags: {type: object, additionalProperties: true}}}
                  - {type: object, required: [name], properties: {name: {type: string}, extra: {}}, additionalProperties: true}
  /pets/{id}/anything:
    get:
      operationId: petAnything
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses:
        "200":
          description: a pet or anything
          content:
            application/json:
              schema:
                oneOf:
                  - $ref: "#/components/schemas/Cat"
                  - {type: object, additionalProperties: true}
  /pets:
    post:
      operationId: createPet
      requestBody:
        required: true
        content:
          application/json:
            schema: {type: object, required: [name], properties: {name: {type: string}}}
      responses:
        "200":
          description: created at once
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Cat"}
        "202": {description: queued}
        "204": {description: nothing to say}
components:
  schemas:
    Cat:
      type: object
      description: A cat.
      required: [kind, name]
      properties:
        kind: {type: string}
        name: {type: string}
        lives: {type: integer}
    Dog:
      type: object
      description: A dog.
      required: [kind, name]
      properties:
        kind: {type: string, enum: [canine]}
        name: {type: string}
        good: {type: boolean}
"##;

fn generate(operations: &[&str]) -> Generated {
    let api = OpenApi::parse(PETS).expect("document parses");
    Scaffold::new(&api)
        .operations(operations.iter().copied())
        .generate()
}

fn assert_contains(code: &str, expected: &[&str]) {
    for text in expected {
        assert!(code.contains(text), "missing:\n{text}\n--- in:\n{code}");
    }
}

#[test]
fn a_discriminator_that_names_every_form_tags_the_enum() {
    let generated = generate(&["getPet"]);
    assert_eq!(generated.unsupported, []);
    assert_contains(
        &generated.code,
        &[
            "    // The success response is a `oneOf` of 2 forms: an enum tagged by `kind`, the document's\n    // discriminator.\n    result = GetPetResult,\n",
            // The mapping names Cat's tag; Dog's is the one value its `kind` admits.
            "#[serde(tag = \"kind\")]\npub enum GetPetResult {\n    /// A cat.\n    #[serde(rename = \"feline\")]\n    Cat(CatSummary),\n    /// A dog.\n    #[serde(rename = \"canine\")]\n    Dog(DogSummary),\n}\n",
        ],
    );
    // The tag is the enum's: the forms' structs do not repeat it.
    let cat = generated
        .code
        .split("pub struct CatSummary {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .expect("CatSummary");
    assert!(!cat.contains("kind"), "{cat}");
    assert!(cat.contains("pub lives: Option<i64>,"), "{cat}");
    // A 404 that only names the status is left to the default mapping.
    assert!(!generated.code.contains("status(404)"));
    assert_eq!(
        generated.actions[0].open_decisions,
        [Decision::Effect, Decision::Consent, Decision::Retry]
    );
}

#[test]
fn forms_without_a_discriminator_are_an_untagged_enum_and_a_free_form_one_returns_no_data() {
    let generated = generate(&["petShape", "petAnything"]);
    assert_contains(
        &generated.code,
        &[
            "    // The success response is a `anyOf` of 2 forms: an untagged enum, since it declares no\n    // discriminator; serde reads the first form the answer fits, in the document's order.\n    result = PetShapeResult,\n",
            "#[serde(untagged)]\npub enum PetShapeResult {\n    /// Form 1.\n    Form1(PetShapeResultForm1),\n    /// Form 2.\n    Form2(PetShapeResultForm2),\n}\n",
            "    // one form of its `oneOf` has no Rust type (the success response is a free-form object); the action returns no data.\n    result = (),\n",
        ],
    );
}

#[test]
fn every_success_response_is_read_and_an_empty_one_completes_with_no_data() {
    let generated = generate(&["createPet"]);
    assert_contains(
        &generated.code,
        &[
            // The 202 keeps the default mapping (pending); the 204 completes with no data.
            "    // 204 has no body (\"nothing to say\"): the result is `None` (`completed(empty)`).\n    status(204) = completed(empty),\n    result = Option<CatSummary>,\n",
        ],
    );
    assert!(!generated.code.contains("status(202)"));
}

#[test]
fn a_404_a_read_describes_as_an_answer_is_the_authors_decision() {
    let generated = generate(&["isAdopted", "deletePet"]);
    let adopted = &generated.actions[0];
    assert_eq!(
        adopted.open_decisions,
        [
            Decision::Effect,
            Decision::Consent,
            Decision::Retry,
            Decision::NotFound
        ]
    );
    assert_contains(
        &generated.code,
        &[
            "    // 404, in the document's words: \"Not Found if the pet has not been adopted\". An answer or an\n",
            "    status(404) = choose,\n    result = (),\n",
        ],
    );
    // A write that finds nothing has not done its work, whatever the description says.
    assert_eq!(generated.code.matches("status(404)").count(), 1);
    assert_eq!(
        generated.actions[1].open_decisions,
        [Decision::Effect, Decision::Consent, Decision::Retry]
    );
    assert_eq!(Decision::NotFound.as_str(), "status(404)");
    assert_eq!(
        Decision::NotFound.choices(),
        ["completed(value = …)", "rejected"]
    );
}
